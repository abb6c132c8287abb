"""What a learner checkpoint holds, and putting it back: a DQN learner's online and target
networks, optimizer and fp16 scaler, or a TD3/SAC learner's networks, optimizers and temperature
(learner/actor_critic_step.py); the counters and torch's RNG for both. A checkpoint of one kind
refused by the other is a one-line error (a resume with a different algo.name), and so is one
whose networks have other shapes (other network settings, or an older raypex's networks)."""

from __future__ import annotations

import torch


def learner_state(learner) -> dict:
    """Everything a `Learner` needs to resume exactly (plain tensors and dicts, for torch.save)."""
    common = {"counters": {"updates": learner.updates, "epochs": learner.epochs, "version": learner.version},
              "torch_rng": torch.get_rng_state()}
    if learner.actor_critic:
        return {"actor_critic": learner.step.state_dict(), **common}
    scaler = learner.precision.scaler
    return {"online": learner.online.state_dict(), "target": learner.target.state_dict(),
            "optimizer": learner.optimizer.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None, **common}


def restore_learner_state(learner, state: dict) -> None:
    """Put `learner_state` output back into `learner` (a Learner built from the same settings)."""
    if learner.actor_critic != ("actor_critic" in state):
        saved = "td3 or sac" if "actor_critic" in state else "dqn"
        raise ValueError(f"this checkpoint is of a {saved} learner; this run's algo.name is {learner.s.algo}")
    try:
        if learner.actor_critic:
            learner.step.load_state_dict(state["actor_critic"])
        else:
            learner.online.load_state_dict(state["online"])
            learner.target.load_state_dict(state["target"])
            learner.optimizer.load_state_dict(state["optimizer"])
            for group in learner.optimizer.param_groups:  # a CPU run's checkpoint says capturable=False
                group["capturable"] = learner.device.type == "cuda"
            if learner.precision.scaler is not None and state["scaler"] is not None:
                learner.precision.scaler.load_state_dict(state["scaler"])
    except RuntimeError as err:  # torch's missing keys, unexpected keys or size mismatches, one per line
        lines = [line.strip() for line in str(err).strip().splitlines()]
        raise ValueError(f"this checkpoint's networks do not fit this run's (other network settings, or saved by a "
                         f"raypex whose networks differ): {(lines[1] if len(lines) > 1 else lines[0]).rstrip('.')}") from None
    counters = state["counters"]
    learner.updates, learner.epochs, learner.version = counters["updates"], counters["epochs"], counters["version"]
    torch.set_rng_state(state["torch_rng"].cpu())  # loaded with map_location=cuda on a GPU
