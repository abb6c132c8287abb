"""What one update costs on this machine, by critic: for TD3 or SAC by critic kind (plain, CrossQ's
batch renormalization, SALE's embeddings, the categorical critic alone and with each), the
whole update and the critics' step alone; for the
DQN family (`--family dqn`), DQN's, QR-DQN's and IQN's whole update. One thread, an env's shapes
and a precision.

    python -m benchmarks.update_cost --obs 17 --actions 6 --hidden 256 256 --precision bf16
    python -m benchmarks.update_cost --family dqn --image 4 10 10 --actions 6 --hidden 128

Synthetic batches (the learner's cost does not depend on their values); each figure is the mean
of `--updates` updates after 30 to warm up.
"""

from __future__ import annotations

import argparse
import time

import torch

from raypex.learner.actor_critic_step import ActorCriticStep
from raypex.learner.algorithms.registry import algorithm
from raypex.learner.settings import LearnerSettings


def settings(obs: int, actions: int, hidden: list[int], algo: str, critic_norm: str, batch: int,
             sale: bool = False, precision: str = "fp32", critic_head: str = "scalar", bins: int = 101,
             compiled: bool = False) -> LearnerSettings:
    return LearnerSettings(
        obs_shape=(obs,), obs_dtype="float32", num_actions=0, hidden=hidden, dueling=False, double_dqn=False,
        huber_delta=1.0, lr=1e-3, adam_eps=1e-8, max_grad_norm=100.0, micro_batch=batch, accumulation_steps=1,
        target_update="polyak", target_update_every=1, target_tau=0.005, updates_per_epoch=1, broadcast_every_epochs=1,
        precision=precision, compile=compiled, seed=0, algo=algo, action_low=(-1.0,) * actions,
        action_high=(1.0,) * actions,
        policy_delay=1, critic_norm=critic_norm, sale=sale, critic_head=critic_head, critic_bins=bins,
        critic_range=(-100.0, 100.0) if critic_head == "categorical" else None)


def q_settings(obs_shape: tuple[int, ...], obs_dtype: str, actions: int, hidden: list[int], algo: str, batch: int,
               quantiles: int, precision: str, compiled: bool = False) -> LearnerSettings:
    return LearnerSettings(
        obs_shape=obs_shape, obs_dtype=obs_dtype, num_actions=actions, hidden=hidden, dueling=True, double_dqn=True,
        huber_delta=1.0, lr=1e-4, adam_eps=1e-8, max_grad_norm=10.0, micro_batch=batch, accumulation_steps=1,
        target_update="hard", target_update_every=1000, target_tau=0.005, updates_per_epoch=1,
        broadcast_every_epochs=1, precision=precision, compile=compiled, seed=0, algo=algo, quantiles=quantiles)


def q_family(args) -> None:
    """DQN's, QR-DQN's and IQN's whole update, in turn within each round."""
    shape = tuple(args.image) if args.image else (args.obs,)
    dtype = "uint8" if args.image else "float32"
    print(f"obs {list(shape)} {dtype}, actions {args.actions}, hidden {args.hidden}, batch {args.batch}, "
          f"quantiles {args.quantiles}, {args.precision}, 1 thread{', compiled' if args.compile else ''}")
    steps, batches = {}, {}
    for algo in ("dqn", "qrdqn", "iqn"):
        steps[algo] = algorithm(algo).build_step(q_settings(shape, dtype, args.actions, args.hidden, algo, args.batch,
                                                            args.quantiles, args.precision, args.compile),
                                                 torch.device("cpu"))
        obs = (torch.randint(0, 255, (1, args.batch, *shape), dtype=torch.uint8) if args.image
               else torch.randn(1, args.batch, *shape))
        batches[algo] = {"obs": obs, "action": torch.randint(0, args.actions, (1, args.batch)),
                         "return": torch.randn(1, args.batch), "discount": torch.full((1, args.batch), 0.99),
                         "next_obs": obs.clone()}
        for _ in range(30):
            steps[algo](batches[algo])
    spent = dict.fromkeys(steps, 0.0)
    for _ in range(args.updates // 10):  # ten of each in turn: a busy moment slows all alike
        for algo, step in steps.items():
            start = time.perf_counter()
            for _ in range(10):
                step(batches[algo])
            spent[algo] += time.perf_counter() - start
    for algo, seconds in spent.items():
        print(f"{algo:6s}  whole update {seconds / (args.updates // 10 * 10) * 1e3:6.2f} ms")


def update_ms(step: ActorCriticStep, batch: dict, with_actor: bool, updates: int) -> float:
    for _ in range(30):
        step.update(batch, step.draw_noise(), with_actor)
    start = time.perf_counter()
    for _ in range(updates):
        step.update(batch, step.draw_noise(), with_actor)
    return (time.perf_counter() - start) / updates * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--obs", type=int, default=17)
    parser.add_argument("--actions", type=int, default=6)
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--algo", default="sac", choices=["td3", "sac"])
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--family", default="actor-critic", choices=["actor-critic", "dqn"])
    parser.add_argument("--image", type=int, nargs=3, metavar=("C", "H", "W"), help="--family dqn: uint8 images")
    parser.add_argument("--quantiles", type=int, default=32, help="--family dqn: QR-DQN's and IQN's")
    parser.add_argument("--bins", type=int, default=101, help="the categorical critic's support")
    parser.add_argument("--compile", action="store_true", help="learner.compile: td3's and sac's critics' loss, "
                        "DQN's networks, QR-DQN's and IQN's loss through torch.compile")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.family == "dqn":
        q_family(args)
        return
    print(f"{args.algo}, obs {args.obs}, actions {args.actions}, hidden {args.hidden}, batch {args.batch}, "
          f"{args.precision}, 1 thread{', compiled' if args.compile else ''}")
    for kind, critic_norm, sale, head in (("plain", "none", False, "scalar"),
                                          ("batch_renorm", "batch_renorm", False, "scalar"),
                                          ("sale", "none", True, "scalar"),
                                          ("categorical", "none", False, "categorical"),
                                          ("cat+ln", "layer_norm", False, "categorical"),
                                          ("cat+renorm", "batch_renorm", False, "categorical"),
                                          ("cat+sale", "none", True, "categorical")):
        step = algorithm(args.algo).build_step(settings(args.obs, args.actions, args.hidden, args.algo, critic_norm,
                                                        args.batch, sale, args.precision, head, args.bins,
                                                        args.compile),
                                               torch.device("cpu"))
        batch = {"obs": torch.randn(1, args.batch, args.obs), "action": torch.rand(1, args.batch, args.actions) * 2 - 1,
                 "return": torch.randn(1, args.batch), "discount": torch.full((1, args.batch), 0.99),
                 "next_obs": torch.randn(1, args.batch, args.obs)}
        step.warm_up(batch)  # with --compile, torch.compile compiles here
        whole = update_ms(step, batch, True, args.updates)
        critics = update_ms(step, batch, False, args.updates)
        print(f"{kind:12s}  whole update {whole:6.2f} ms  critics' step alone {critics:6.2f} ms")


if __name__ == "__main__":
    main()
