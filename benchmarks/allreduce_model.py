"""What summing gradients over a group of learners would cost on 2, 4 and 8 GPUs: the bytes one
update all-reduces (counted from the config's own networks, as learner/gradient_group.py reduces
them), the time a ring all-reduce of them takes on each link, the share of an update that leaves
to training when the all-reduce follows the backward pass, and the batch per learner at which it
would hide behind the backward pass instead.

    python -m benchmarks.allreduce_model configs/pong.yaml --samples-per-s 536000 --batch 2048
    python -m benchmarks.allreduce_model configs/halfcheetah.yaml --samples-per-s 592000 --batch 256

`--samples-per-s` and `--batch` are one learner's measured rate at that batch (the results page's
H100 figures); the update's time is then batch / rate at any batch, and its backward pass taken as
two thirds of it. A ring all-reduce of S bytes over N learners sends 2(N-1)/N x S per learner in
2(N-1) steps: time = 2(N-1) x latency + 2(N-1)/N x S / bandwidth. The links' figures are
assumptions, not measurements: NVLink 4 (H100) at NCCL's effective 370 GB/s for a ring (NVIDIA's
figure for its 450 GB/s line rate), 10 us a step; Ethernet at 90% of its line rate over TCP, 30 us
a step.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from raypex.actors.envs import inspect_env
from raypex.cluster.config.loading import load_config
from raypex.cluster.config.shipped import config_path
from raypex.cluster.plan.settings import learner_settings
from raypex.learner.algorithms.registry import algorithm

LINKS = {  # name: (bytes per second, seconds per ring step)
    "NVLink 4": (370e9, 10e-6),
    "100 Gb Ethernet": (0.9 * 100e9 / 8, 30e-6),
    "25 Gb Ethernet": (0.9 * 25e9 / 8, 30e-6),
}
GROUPS = (2, 4, 8)
BACKWARD_SHARE = 2 / 3  # of an update's time: the backward pass, which an overlapped all-reduce hides behind


def bytes_per_update(config_path: Path) -> tuple[str, float]:
    """(what is reduced, mean fp32 gradient bytes all-reduced per update) for the config's networks."""
    config = load_config(config_path, [])
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    settings = learner_settings(config, spec)
    step = algorithm(settings.algo).build_step(settings, torch.device("cpu"))
    if hasattr(step, "critic_params"):  # actor-critic: the critics (and encoder) every update, the actor every policy_delay-th
        every = count(step.critic_step_params)
        actor = count(step.actor_params + list(step.objective.parameters()))
        return (f"{settings.algo}: critics {every:,} + actor {actor:,} every {settings.policy_delay} updates",
                4.0 * (every + actor / settings.policy_delay))
    return f"{settings.algo}: {count(step.params):,} parameters", 4.0 * count(step.params)


def count(params) -> int:
    return sum(p.numel() for p in params)


def ring_seconds(size: float, learners: int, bandwidth: float, latency: float) -> float:
    steps = 2 * (learners - 1)
    return steps * latency + steps / learners * size / bandwidth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=config_path, help="a YAML file or a shipped config's name")
    parser.add_argument("--samples-per-s", type=float, required=True, help="one learner's measured update rate")
    parser.add_argument("--batch", type=int, required=True, help="the batch that rate was measured at")
    args = parser.parse_args()
    what, size = bytes_per_update(args.config)
    update_s = args.batch / args.samples_per_s
    print(f"{args.config}: {what}; {size / 1e6:.2f} MB all-reduced per update; one learner's update at batch "
          f"{args.batch}: {update_s * 1e3:.2f} ms")
    print("| link | learners | all-reduce | update's share left to training | batch per learner that hides it |")
    print("|---|---|---|---|---|")
    for link, (bandwidth, latency) in LINKS.items():
        for learners in GROUPS:
            reduce_s = ring_seconds(size, learners, bandwidth, latency)
            hides_at = reduce_s / BACKWARD_SHARE * args.samples_per_s
            print(f"| {link} | {learners} | {reduce_s * 1e3:.2f} ms | {update_s / (update_s + reduce_s):.0%} | "
                  f"{hides_at:,.0f} |")


if __name__ == "__main__":
    main()
