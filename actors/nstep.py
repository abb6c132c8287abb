"""N-step transition folding for a collector that steps a Gymnasium vector env.

Ape-X learns from n-step transitions (obs, action, discounted n-step return, bootstrap discount,
obs n steps later) rather than single steps. `NStepFolder` turns the per-step output of a vector env
into those transitions on the collector's hot path: it buffers steps in preallocated arrays and
folds them with numpy, vectorized over steps and envs (the only Python loop is over the n window
offsets). It also hides Gymnasium's NEXT_STEP autoreset: the step after an episode ended is a reset
step (action ignored, reward 0) and never becomes, or becomes part of, a transition.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_BUFFERS = ("obs", "action", "reward", "terminated", "truncated", "next_obs", "valid")
_VALUES = ("q_taken", "next_value")  # with_priorities: the acting Q-values the TD error is made of


class NStepFolder:
    """Buffers vector-env steps and emits each n-step transition exactly once when it is complete.

    Step t of env e is *valid* unless step t-1 of env e ended an episode (terminated or truncated):
    with NEXT_STEP autoreset that step only resets the env, so it is dropped. A transition starts at
    every valid step s. Its window is steps s, s+1, ..., s+m-1 where m <= n and the window stops
    early at (and includes) the first step that terminated or truncated. Then

        return   = sum_{k<m} gamma^k * reward[s+k]
        discount = 0 if the window ends with a termination, else gamma^m   (full n steps or truncation)
        next_obs = next_obs[s+m-1]   (for a done step: the episode's final observation)

    so the learner's target is return + discount * max_a Q(next_obs, a). A transition is complete
    once m == n or its window ended with a done; `pop` returns all complete ones, ordered by start
    step then env index, and keeps incomplete ones (at most n-1 per env) for a later `pop`.

    Example, n=3, gamma=0.5, one env, rewards r0..r4 = 1,2,3,4,5, step 3 terminates:
        s=0: return 1 + 0.5*2 + 0.25*3 = 2.75, discount 0.125, next_obs = next_obs[2]
        s=1: return 2 + 0.5*3 + 0.25*4 = 4.5,  discount 0 (step 3 terminated), next_obs = next_obs[3]
        s=2: return 3 + 0.5*4 = 5.0,           discount 0, next_obs = next_obs[3]
        s=3: return 4,                         discount 0, next_obs = next_obs[3]
        step 4 is the autoreset step: dropped; step 5 starts the next episode.

    Buffers hold chunk_steps + n steps. Calling `pop` at least every chunk_steps `add_step` calls
    never fills them (after a pop at most n-1 steps stay buffered); if a caller pops less often the
    buffers double in size (a copy, no error).

    With `with_env`, `pop` adds an "env" field: the env index of every transition (frame-once
    replay needs it to find the frames of obs and next_obs).

    With `with_priorities`, `pop` adds "priority", each transition's |n-step TD error| under the
    Q-values the collector acted with (Ape-X's initial priority, at no extra forward pass):

        priority = |return + discount * next_value[s+m-1] - q_taken[s]|

    `add_step` takes q_taken = Q(obs, action) for the action actually taken, and `set_next_value`
    gives the newest step max_a Q(next_obs, a) once the collector has that step's next_obs' values
    (with NEXT_STEP autoreset, the next act's obs is this step's next_obs, the final observation
    included), so every buffered step must have it before `pop`.
    """

    def __init__(self, n: int, gamma: float, num_envs: int, obs_shape: tuple[int, ...], obs_dtype: Any,
                 chunk_steps: int, with_env: bool = False, with_priorities: bool = False, action_dim: int = 0):
        if n < 1 or num_envs < 1 or chunk_steps < 1:
            raise ValueError(f"need n, num_envs, chunk_steps >= 1, got {n}, {num_envs}, {chunk_steps}")
        self.n, self.gamma, self.num_envs = int(n), float(gamma), int(num_envs)
        self.obs_shape, self.obs_dtype = tuple(obs_shape), np.dtype(obs_dtype)
        self.with_env = with_env  # pop also says which env each transition came from
        self.action_dim = int(action_dim)  # > 0: Box actions of this many float32s; 0: Discrete (int64)
        self._names = _BUFFERS + (_VALUES if with_priorities else ())
        self._powers = self.gamma ** np.arange(self.n + 1)
        self._bufs = self._allocate(chunk_steps + self.n)
        self._t = 0  # steps buffered: rows 0 .. _t-1
        self._prev_done = np.zeros(self.num_envs, bool)  # env's last step ended an episode

    def _allocate(self, capacity: int) -> dict[str, np.ndarray]:
        E, shape = self.num_envs, self.obs_shape
        dtypes = {"obs": self.obs_dtype, "action": np.float32 if self.action_dim else np.int64, "reward": np.float64,
                  "terminated": bool, "truncated": bool, "next_obs": self.obs_dtype, "valid": bool,
                  "q_taken": np.float32, "next_value": np.float32}
        row_shapes = {"obs": shape, "next_obs": shape, "action": (self.action_dim,) if self.action_dim else ()}
        return {k: np.zeros((capacity, E, *row_shapes.get(k, ())), dtypes[k]) for k in self._names}

    def _reserve(self, steps: int) -> None:
        capacity = len(self._bufs["valid"])
        if steps > capacity:
            new = self._allocate(max(steps, 2 * capacity))
            for k, buf in self._bufs.items():
                new[k][: self._t] = buf[: self._t]
            self._bufs = new

    @property
    def next_is_reset(self) -> np.ndarray:
        """Per env: whether its next step is an autoreset step (its last step ended an episode)."""
        return self._prev_done

    def add_step(self, obs: np.ndarray, action: np.ndarray, reward: np.ndarray, terminated: np.ndarray,
                 truncated: np.ndarray, next_obs: np.ndarray, episode_end: np.ndarray | None = None,
                 q_taken: np.ndarray | None = None) -> np.ndarray:
        """Record one vector-env step (all arrays have leading dim num_envs; obs arrays are copied);
        returns which envs took a real step (the others took an autoreset step, dropped).

        `episode_end` (default terminated | truncated) says where the env really starts a new
        episode, so that its next step is a reset step; it differs from `terminated` only when a
        step is terminal for learning but the game goes on (a lost life with terminal-on-life-loss).
        """
        self._reserve(self._t + 1)
        b, t = self._bufs, self._t
        valid = ~self._prev_done
        b["obs"][t] = obs
        b["action"][t] = action
        b["reward"][t] = reward
        b["terminated"][t] = terminated
        b["truncated"][t] = truncated
        b["next_obs"][t] = next_obs
        b["valid"][t] = valid
        if "q_taken" in b:
            b["q_taken"][t] = q_taken
        ended = b["terminated"][t] | b["truncated"][t] if episode_end is None else np.asarray(episode_end)
        # A reset step's flags are meaningless (gymnasium reports False); never let it mark a done.
        self._prev_done = ended & valid
        self._t = t + 1
        return valid

    def set_next_value(self, value: np.ndarray) -> None:
        """max_a Q(next_obs, a) of the newest buffered step, per env (with_priorities)."""
        if self._t:
            self._bufs["next_value"][self._t - 1] = value

    def _fold(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For every buffered start step [T, E]: (complete, return, window length m, terminated)."""
        T, b = self._t, self._bufs
        valid = b["valid"][:T]
        ret = np.zeros(valid.shape, np.float64)
        m = np.zeros(valid.shape, np.int64)
        term = np.zeros(valid.shape, bool)
        ended = np.zeros(valid.shape, bool)
        open_ = valid.copy()  # window still extends to offset k (rows >= T-k lack step s+k: m < n)
        for k in range(min(self.n, T)):
            L = T - k  # start steps s whose step s+k is buffered
            o = open_[:L]
            ret[:L] += np.where(o, self._powers[k] * b["reward"][k:T], 0.0)
            m[:L] += o
            te, tr = b["terminated"][k:T] & o, b["truncated"][k:T] & o
            term[:L] |= te
            ended[:L] |= te | tr
            o &= ~(te | tr)  # in place: later offsets skip windows that ended here
        complete = valid & (ended | (m == self.n))
        return complete, ret, m, term

    def pop(self) -> dict[str, np.ndarray]:
        """All transitions complete now (removed), ordered by start step then env index."""
        complete, ret, m, term = self._fold()
        s, e = np.nonzero(complete)
        b = self._bufs
        out = {
            "obs": b["obs"][s, e],
            "action": b["action"][s, e],
            "return": ret[s, e].astype(np.float32),
            "discount": np.where(term[s, e], 0.0, self._powers[m[s, e]]).astype(np.float32),
            "next_obs": b["next_obs"][s + m[s, e] - 1, e],
        }
        if self.with_env:
            out["env"] = e.astype(np.int64)
        if "q_taken" in b:
            target = out["return"] + out["discount"] * b["next_value"][s + m[s, e] - 1, e]
            out["priority"] = np.abs(target - b["q_taken"][s, e]).astype(np.float32)
        valid = b["valid"][: self._t]
        valid &= ~complete
        rows = np.flatnonzero(valid.any(axis=1))
        if len(rows) == 0:
            self._t = 0
        elif rows[0] > 0:  # drop the steps before the first pending start (fewer than n rows remain)
            first, keep = rows[0], self._t - rows[0]
            for buf in b.values():
                buf[:keep] = buf[first: self._t].copy()
            self._t = keep
        return out

    @property
    def pending(self) -> int:
        """Number of valid buffered steps whose transition is not complete yet."""
        complete = self._fold()[0]
        return int(np.count_nonzero(self._bufs["valid"][: self._t] & ~complete))

    def get_state(self) -> dict[str, Any]:
        """A plain dict of numpy arrays and ints (copies) from which `set_state` restores the folder."""
        state: dict[str, Any] = {k: buf[: self._t].copy() for k, buf in self._bufs.items()}
        state.update(n=self.n, num_envs=self.num_envs, steps=self._t, prev_done=self._prev_done.copy())
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what `get_state` returned (for a folder built with the same n and num_envs)."""
        if state["n"] != self.n or state["num_envs"] != self.num_envs:
            raise ValueError(f"state is for n={state['n']}, num_envs={state['num_envs']}; "
                             f"this folder has n={self.n}, num_envs={self.num_envs}")
        steps = int(state["steps"])
        self._t = 0
        self._reserve(steps)
        for k, buf in self._bufs.items():
            buf[:steps] = state[k]
        self._t = steps
        self._prev_done = np.array(state["prev_done"], bool).copy()
