"""What a learner checkpoint holds, and putting it back: the algorithm step's state (its networks,
optimizers and loss scales: learner/algorithm.py), the learner's counters and torch's RNG. A
checkpoint of another kind of step is a one-line error (a resume with a different algo.name), and
so is one whose networks have other shapes (other network settings, or an older raypex's
networks). Checkpoints written before the steps were plug-ins (DQN's networks at the top level,
TD3's and SAC's under "actor_critic") are read as the same thing."""

from __future__ import annotations

import io
import pickle
import warnings

import torch

from raypex.replay.state_file import first_sentence

KINDS = {"dqn": "dqn", "actor_critic": "td3 or sac"}
# The network each kind of step acts with, for checkpoints written before the state named it.
FORMER_POLICY_KEYS = {"dqn": "online", "actor_critic": "actor"}


def learner_state(learner) -> dict:
    """Everything a `Learner` needs to resume exactly (plain tensors and dicts, for torch.save)."""
    return {"kind": learner.step.kind, "policy_key": learner.step.policy_key, "step": learner.step.state_dict(),
            "counters": {"updates": learner.updates, "epochs": learner.epochs, "version": learner.version},
            "torch_rng": torch.get_rng_state()}


class UnsafeLearnerState(ValueError):
    """Learner-state bytes that hold more than tensors and plain containers (a pickle that could
    run code): refused by torch's weights-only loader, nothing in them run."""


def read_learner_state(data: bytes, device: torch.device | str = "cpu", name: str = "the learner state") -> dict:
    """`learner_state` output from torch.save bytes (a checkpoint's ckpt-E.pt), loaded weights-only:
    tensors, dicts, lists and numbers come back, anything else is refused (UnsafeLearnerState, one
    line naming `name`)."""
    try:
        with warnings.catch_warnings():  # torch warns of pickle protocols it did not write
            warnings.simplefilter("ignore")
            state = torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as err:
        raise UnsafeLearnerState(f"{name} is not plain tensors ({first_sentence(err)}); raypex loads nothing else from a "
                                 "run directory") from None
    if not isinstance(state, dict):
        raise UnsafeLearnerState(f"{name} is not a learner state (a {type(state).__name__}, not a mapping)")
    return state


def _kind_and_step_state(state: dict) -> tuple[str, dict]:
    if "kind" in state:
        return state["kind"], state["step"]
    if "actor_critic" in state:
        return "actor_critic", state["actor_critic"]
    return "dqn", {key: state[key] for key in ("online", "target", "optimizer", "scaler")}


def restore_learner_state(learner, state: dict) -> None:
    """Put `learner_state` output back into `learner` (a Learner built from the same settings)."""
    kind, step_state = _kind_and_step_state(state)
    if kind != learner.step.kind:
        raise ValueError(f"this checkpoint is of a {KINDS.get(kind, kind)} learner; this run's algo.name is {learner.s.algo}")
    try:
        learner.step.load_state_dict(step_state)
    except RuntimeError as err:  # torch's missing keys, unexpected keys or size mismatches, one per line
        lines = [line.strip() for line in str(err).strip().splitlines()]
        raise ValueError(f"this checkpoint's networks do not fit this run's (other network settings, or saved by a "
                         f"raypex whose networks differ): {(lines[1] if len(lines) > 1 else lines[0]).rstrip('.')}") from None
    counters = state["counters"]
    learner.updates, learner.epochs, learner.version = counters["updates"], counters["epochs"], counters["version"]
    torch.set_rng_state(state["torch_rng"].cpu())  # loaded with map_location=cuda on a GPU


def policy_arrays(state: dict) -> dict:
    """The policy network's weights in `learner_state` output, as they are published (CPU float32
    numpy arrays by name: learner/weights.py export_arrays)."""
    kind, step_state = _kind_and_step_state(state)
    policy = step_state[state.get("policy_key") or FORMER_POLICY_KEYS[kind]]
    return {name: t.detach().to("cpu", torch.float32).numpy() for name, t in policy.items()}
