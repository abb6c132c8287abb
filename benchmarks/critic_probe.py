"""Where a TD3/SAC run's critics stand, read from its newest checkpoint: how its TD errors are
spread over the replay (which rows hold the squared error, terminal rows against the rest), and
whether bf16 autocast changes the gradients (cosine against fp32 on the same batch and weights).

    python -m benchmarks.critic_probe RUN_DIR [--rows 8192] [--seed 0]

Why: a config that learns one MuJoCo env and not another (BENCHMARKS.md in git history) left two
suspects this answers without another training run: bf16's precision, and a squared loss led by a
few rows near the episodes' ends.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from raypex.actors.envs import inspect_env
from raypex.cluster.config.loading import ConfigError, saved_run_config
from raypex.cluster.driver.checkpoints import load_latest
from raypex.cluster.plan.settings import learner_settings
from raypex.cluster.storage import read_replay
from raypex.learner.actor_critic_step import TRANSITION, ActorCriticStep
from raypex.learner.algorithms.registry import algorithm
from raypex.learner.learner_state import read_learner_state
from raypex.learner.precision import make_precision

GRADIENT_ROWS = 256  # one micro-batch of the HalfCheetah config


@dataclass
class CriticProbe:
    """What `probe` found."""

    rows: int
    terminal_rows: int
    abs_error_quantiles: dict[str, float]  # of |Q1 - target|: 50%, 90%, 99%, max
    top_1pct_share: float  # of the summed squared error, held by the rows with the largest 1% of errors
    top_10pct_share: float
    terminal_mean_abs_error: float | None
    other_mean_abs_error: float
    critic_gradient_cosine: float  # bf16 against fp32
    actor_gradient_cosine: float


def _gradients(step: ActorCriticStep, batch: dict[str, torch.Tensor], noise: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The critics' and the actor's gradients on `batch`, each flat; the actor's through critics in
    eval mode, as the update takes it (batch-renormalized critics read their running statistics)."""
    critic = torch.autograd.grad(step.critic_loss(batch, None, noise).loss, step.critic_params)
    step.critic.eval()
    actor = torch.autograd.grad(step.actor_loss(batch["obs"], noise)[0], step.actor_params)
    step.critic.train()
    return torch.cat([g.flatten() for g in critic]), torch.cat([g.flatten() for g in actor])


def probe(steps: dict[str, ActorCriticStep], columns: dict[str, np.ndarray], rows: int, seed: int) -> CriticProbe:
    """`steps`: the same weights as an fp32 and a bf16 ActorCriticStep; `columns`: replay rows."""
    generator = torch.Generator().manual_seed(seed)
    picked = torch.randperm(len(columns["obs"]), generator=generator)[:rows].numpy()
    batch = {k: torch.as_tensor(np.asarray(columns[k])[picked]) for k in TRANSITION}
    with torch.no_grad():
        size = steps["fp32"].critic_loss(batch, None, torch.randn(batch["action"].shape,
                                                                   generator=generator)).td_error.abs()
    squared = size.square().sort(descending=True).values
    terminal = batch["discount"] == 0
    small = {k: v[:GRADIENT_ROWS] for k, v in batch.items()}
    noise = torch.randn(small["action"].shape, generator=generator)
    (critic32, actor32), (critic16, actor16) = (_gradients(step, small, noise) for step in (steps["fp32"], steps["bf16"]))
    cosine = torch.nn.functional.cosine_similarity
    quantiles = torch.quantile(size, torch.tensor([0.5, 0.9, 0.99, 1.0]))
    return CriticProbe(
        rows=len(size), terminal_rows=int(terminal.sum()),
        abs_error_quantiles=dict(zip(("50%", "90%", "99%", "max"), (round(float(q), 3) for q in quantiles))),
        top_1pct_share=float(squared[: max(1, len(size) // 100)].sum() / squared.sum()),
        top_10pct_share=float(squared[: max(1, len(size) // 10)].sum() / squared.sum()),
        terminal_mean_abs_error=float(size[terminal].mean()) if terminal.any() else None,
        other_mean_abs_error=float(size[~terminal].mean()),
        critic_gradient_cosine=float(cosine(critic32, critic16, 0)),
        actor_gradient_cosine=float(cosine(actor32, actor16, 0)))


def load_run(run_dir: Path) -> tuple[dict[str, ActorCriticStep], dict[str, np.ndarray], int]:
    """The run's newest checkpoint as fp32 and bf16 steps, its first shard's rows, and its env steps."""
    try:
        config = saved_run_config(run_dir)
    except ConfigError as err:
        raise SystemExit(str(err)) from None
    if config.algo.name == "dqn":
        raise SystemExit(f"{run_dir}: a dqn run; this probe reads td3 and sac critics")
    settings = learner_settings(config, inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack))
    if len(settings.obs_shape) != 1:
        raise SystemExit(f"{run_dir}: observations of shape {settings.obs_shape}; this probe reads flat ones "
                         "(an image replay stores frames, not observations)")
    point = load_latest(run_dir / "checkpoints")
    if point is None or not point.replay_files:
        raise SystemExit(f"{run_dir}: no intact checkpoint with its replay (checkpoint.replay true) under checkpoints/")
    state = read_learner_state(point.learner_state)["step"]
    cpu, steps = torch.device("cpu"), {}
    for precision in ("fp32", "bf16"):
        steps[precision] = algorithm(settings.algo).build_step(settings, cpu, precision=make_precision(precision, cpu))
        steps[precision].load_state_dict(state)
    storage = read_replay(point.replay_files[0])["storage"]
    return steps, {k: v[: storage["size"]] for k, v in storage["columns"].items()}, point.env_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--rows", type=int, default=8192, help="replay rows the error figures read")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    steps, columns, env_steps = load_run(args.run_dir)
    found = probe(steps, columns, args.rows, args.seed)
    print(f"{args.run_dir} at {env_steps} env steps, {found.rows} rows of shard 0 ({found.terminal_rows} terminal)")
    print("|TD error| quantiles: " + ", ".join(f"{k} {v}" for k, v in found.abs_error_quantiles.items()))
    print(f"squared error held by the largest 1% of rows: {found.top_1pct_share:.2f}; by 10%: {found.top_10pct_share:.2f}")
    terminal = "none" if found.terminal_mean_abs_error is None else f"{found.terminal_mean_abs_error:.3f}"
    print(f"mean |TD error|: terminal rows {terminal}, the others {found.other_mean_abs_error:.3f}")
    print(f"bf16 against fp32, gradient cosine on {GRADIENT_ROWS} rows: critics {found.critic_gradient_cosine:.4f}, "
          f"actor {found.actor_gradient_cosine:.4f}")


if __name__ == "__main__":
    main()
