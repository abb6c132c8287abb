"""The results page's Stable-Baselines3 references: SB3's DQN on CartPole-v1 and SAC on Pendulum-v1
with the RL Zoo's settings, timed to the bar raypex's config stops at, in a virtual environment of
its own (SB3 is not a raypex dependency):

    python -m venv sb3 && . sb3/bin/activate && pip install stable-baselines3 gymnasium
    python benchmarks/sb3_reference.py --env Pendulum-v1 --seed 0 --curve sb3-pendulum-s0.csv

Torch on one thread (as the RL Zoo runs it); every `--eval-every` env steps, `--episodes` greedy
episodes. The time counts from this script's start (imports included, as raypex's counts from its
command's) to the evaluation that first reaches the target; the env steps are those at that
evaluation. `--curve` writes every evaluation (env steps, seconds, mean return) as CSV, which
`python -m benchmarks.curves` draws beside raypex's runs.
"""

from __future__ import annotations

import argparse
import csv
import time

START = time.perf_counter()

# imported after START: timed from the script's start, as a raypex run's imports are
import gymnasium as gym
import stable_baselines3
import torch
from stable_baselines3 import DQN, SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor

# The RL Zoo's hyperparameters (hyperparams/dqn.yml and sac.yml), the bar raypex's config stops at,
# and a cap of env steps well past where the zoo's runs reach it.
REFERENCES = {
    "CartPole-v1": {
        "algo": DQN, "target": 490.0, "max_steps": 50_000,
        "settings": {"learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000, "learning_starts": 1000, "gamma": 0.99,
                      "target_update_interval": 10, "train_freq": 256, "gradient_steps": 128, "exploration_fraction": 0.16,
                      "exploration_final_eps": 0.04, "policy_kwargs": {"net_arch": [256, 256]}}},
    "Pendulum-v1": {
        "algo": SAC, "target": -200.0, "max_steps": 20_000,
        "settings": {"learning_rate": 1e-3, "batch_size": 256, "learning_starts": 100, "train_freq": 1, "gradient_steps": 1}},
}


class StopAtTarget(BaseCallback):
    """Every `every` env steps, `episodes` greedy episodes; stops training once their mean reaches `target`."""

    def __init__(self, env: gym.Env, every: int, episodes: int, target: float):
        super().__init__()
        self.eval_env, self.every, self.episodes, self.target = env, every, episodes, target
        self.evaluations: list[tuple[int, float, float]] = []  # (env steps, seconds, mean return)

    def _on_step(self) -> bool:
        if self.num_timesteps % self.every:
            return True
        mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=self.episodes, deterministic=True)
        self.evaluations.append((self.num_timesteps, time.perf_counter() - START, float(mean)))
        return mean < self.target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(REFERENCES), default="Pendulum-v1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--curve", help="write every evaluation to this CSV file")
    args = parser.parse_args()
    reference = REFERENCES[args.env]
    torch.set_num_threads(1)
    model = reference["algo"]("MlpPolicy", Monitor(gym.make(args.env)), seed=args.seed, verbose=0,
                              **reference["settings"])
    stop = StopAtTarget(Monitor(gym.make(args.env)), args.eval_every, args.episodes, reference["target"])
    model.learn(total_timesteps=reference["max_steps"], callback=stop)
    if args.curve:
        with open(args.curve, "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["env_steps", "seconds", "eval_return_mean"])
            writer.writerows(stop.evaluations)
    name = f"SB3 {stable_baselines3.__version__} {reference['algo'].__name__} on {args.env}, seed {args.seed}"
    reached = [e for e in stop.evaluations if e[2] >= reference["target"]]
    if not reached:
        print(f"{name}: {reference['target']} not reached in {reference['max_steps']:,} env steps "
              f"({time.perf_counter() - START:.1f} s)")
        raise SystemExit(1)
    steps, seconds, mean = reached[0]
    print(f"{name}: {mean:.1f} >= {reference['target']} after {seconds:.1f} s and {steps:,} env steps")


if __name__ == "__main__":
    main()
