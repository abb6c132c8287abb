"""What a learner checkpoint holds, and putting it back: the algorithm step's state (its networks,
optimizers and loss scales: learner/algorithm.py), the learner's counters and torch's RNG. A
checkpoint of another kind of step is a one-line error (a resume with a different algo.name), and
so is one whose networks have other shapes (other network settings, or an older raypex's
networks). Checkpoints written before the steps were plug-ins (DQN's networks at the top level,
TD3's and SAC's under "actor_critic") are read as the same thing."""

from __future__ import annotations

import torch

KINDS = {"dqn": "dqn", "actor_critic": "td3 or sac"}
POLICY_NETWORK = {"dqn": "online", "actor_critic": "actor"}  # the network each kind of step acts with


def learner_state(learner) -> dict:
    """Everything a `Learner` needs to resume exactly (plain tensors and dicts, for torch.save)."""
    return {"kind": learner.step.kind, "step": learner.step.state_dict(),
            "counters": {"updates": learner.updates, "epochs": learner.epochs, "version": learner.version},
            "torch_rng": torch.get_rng_state()}


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
    return {name: t.detach().to("cpu", torch.float32).numpy() for name, t in step_state[POLICY_NETWORK[kind]].items()}
