"""The results page's Stable-Baselines3 reference: SB3's SAC on Pendulum-v1 with the RL Zoo's
settings, timed to the same bar raypex's config stops at, in a virtual environment of its own
(SB3 is not a raypex dependency):

    python -m venv sb3 && . sb3/bin/activate && pip install stable-baselines3 gymnasium
    python benchmarks/sb3_reference.py --seed 0

Learning rate 1e-3, one update of 256 samples per env step after 100 random steps, torch on one
thread (as the RL Zoo runs it); every `--eval-every` env steps, `--episodes` greedy episodes. The
time counts from this script's start (imports included, as raypex's counts from its command's) to
the evaluation that first reaches `--target`; the env steps are those at that evaluation.
"""

from __future__ import annotations

import argparse
import time

START = time.perf_counter()

# imported after START: timed from the script's start, as a raypex run's imports are
import gymnasium as gym
import stable_baselines3
import torch
from stable_baselines3 import SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor


class StopAtTarget(BaseCallback):
    """Every `every` env steps, `episodes` greedy episodes; stops training once their mean reaches `target`."""

    def __init__(self, env: gym.Env, every: int, episodes: int, target: float):
        super().__init__()
        self.eval_env, self.every, self.episodes, self.target = env, every, episodes, target
        self.reached: tuple[float, int, float] | None = None  # (seconds, env steps, mean return)

    def _on_step(self) -> bool:
        if self.num_timesteps % self.every:
            return True
        mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=self.episodes, deterministic=True)
        if mean >= self.target:
            self.reached = (time.perf_counter() - START, self.num_timesteps, float(mean))
            return False
        return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=-200.0)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--max-steps", type=int, default=20_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = SAC("MlpPolicy", Monitor(gym.make("Pendulum-v1")), learning_rate=1e-3, batch_size=256, learning_starts=100,
                train_freq=1, gradient_steps=1, seed=args.seed, verbose=0)
    stop = StopAtTarget(Monitor(gym.make("Pendulum-v1")), args.eval_every, args.episodes, args.target)
    model.learn(total_timesteps=args.max_steps, callback=stop)
    if stop.reached is None:
        print(f"SB3 SAC on Pendulum-v1, seed {args.seed}: {args.target} not reached in {args.max_steps:,} env steps "
              f"({time.perf_counter() - START:.1f} s)")
        raise SystemExit(1)
    seconds, steps, mean = stop.reached
    print(f"SB3 {stable_baselines3.__version__} SAC on Pendulum-v1, seed {args.seed}: {mean:.1f} >= {args.target} "
          f"after {seconds:.1f} s and {steps:,} env steps")


if __name__ == "__main__":
    main()
