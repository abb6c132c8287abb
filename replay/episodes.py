"""Episodes rebuilt from a shard's stored one-step transitions (what `raypex export --minari` writes).

A shard of a run with algo.n_step 1 holds each env step once: (obs, action, return = the step's
reward, discount = 0 where the episode terminated, else gamma, next_obs), in the order its
collector sent them, its envs' steps interleaved. No env index is stored, so each env's steps are
followed by their observations: a step continues the open episode whose last next_obs is this
step's obs, and starts a new one otherwise (a reset observation). An episode ends where it
terminated (discount 0), or where no later step continues it: truncated by the env's time limit
when it has that many steps, else cut by the run's end and left out. When the ring has wrapped,
each env's oldest episode may have lost its start to the ring, so the first `num_envs` episodes
to start are left out too. Pure numpy: no torch, no Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Episode:
    """One episode's steps: observations [T + 1] (the last is the final one), actions, rewards,
    terminations and truncations [T]."""

    observations: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminated: bool = False
    started_at: int = 0  # its first step's position in the shard's stream

    @property
    def length(self) -> int:
        return len(self.actions)

    def arrays(self) -> dict[str, np.ndarray]:
        """The episode as Minari's episode buffer holds it."""
        steps = self.length
        terminations = np.zeros(steps, bool)
        truncations = np.zeros(steps, bool)
        if self.terminated:
            terminations[-1] = True
        else:
            truncations[-1] = True
        return {"observations": np.stack(self.observations), "actions": np.stack(self.actions),
                "rewards": np.asarray(self.rewards, np.float64), "terminations": terminations,
                "truncations": truncations}


def stream_order(size: int, cursor: int, capacity: int) -> np.ndarray:
    """The ring's rows oldest first: 0 .. size-1 until it wraps, then from `cursor` around."""
    if size < capacity:
        return np.arange(size)
    return np.concatenate([np.arange(cursor, capacity), np.arange(0, cursor)])


def rebuild_episodes(columns: dict[str, np.ndarray], order: np.ndarray, num_envs: int, wrapped: bool,
                     max_episode_steps: int | None) -> list[Episode]:
    """The whole episodes in `columns` (a shard's obs, action, return, discount, next_obs) read in
    `order`, ordered by their first step."""
    obs, action, reward = columns["obs"], columns["action"], columns["return"]
    discount, next_obs = columns["discount"], columns["next_obs"]
    open_by_next: dict[bytes, list[Episode]] = {}  # the episodes still going, by the obs that continues them
    finished: list[Episode] = []
    for position, row in enumerate(order):
        waiting = open_by_next.get(obs[row].tobytes())
        if waiting:
            episode = waiting.pop(0)
        else:
            episode = Episode(observations=[obs[row]], started_at=position)
        episode.actions.append(action[row])
        episode.rewards.append(float(reward[row]))
        episode.observations.append(next_obs[row])
        if discount[row] == 0.0:
            episode.terminated = True
            finished.append(episode)
        else:
            open_by_next.setdefault(next_obs[row].tobytes(), []).append(episode)
    if max_episode_steps is not None:  # never continued: truncated at the time limit, else cut by the run's end
        finished += [e for waiting in open_by_next.values() for e in waiting if e.length == max_episode_steps]
    finished.sort(key=lambda e: e.started_at)
    if wrapped:
        first_starts = sorted({e.started_at for e in finished} | {e.started_at for w in open_by_next.values() for e in w})
        lost_start = set(first_starts[:num_envs])
        finished = [e for e in finished if e.started_at not in lost_start]
    return finished
