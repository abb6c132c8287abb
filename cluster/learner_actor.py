"""LearnerActor: the Ray shell around a Learner, its batch source, publisher and evaluator.

The driver paces it one epoch per `train_epoch` call (two queued, so it never idles between
epochs). Once an evaluation reaches the stop return the actor stops training, so the policy
that was evaluated is exactly the one exported.
"""

from __future__ import annotations

import numpy as np
import ray

from cluster.ray_adapters import BatchSource, WeightPublisher
from learner.settings import LearnerSettings
from replay.mixing import ShardMixer
from replay.rate_limit import SamplesPerInsertLimiter


class LearnerActor:
    """Hosts the Learner; trains, evaluates, checkpoints and exports on the driver's request."""

    def __init__(
        self,
        settings: LearnerSettings,
        device: str,
        num_threads: int,
        shards: list,
        collectors: list,
        limiter: SamplesPerInsertLimiter,
        prefetch: int,
        eval_env: tuple[str, dict, int],
        stop_eval_return: float | None,
    ):
        import torch  # inside the actor only: the driver names this class without importing torch

        from actors.evaluator import Evaluator
        from learner.learner import Learner

        torch.set_num_threads(max(1, num_threads))
        mixer = ShardMixer(len(shards), settings.micro_batch, limiter, settings.seed)
        self.source = BatchSource(shards, mixer, prefetch)
        self.publisher = WeightPublisher(collectors)
        self.learner = Learner(settings, torch.device(device), self.source.next_batch, self.publisher.publish)
        env_id, env_kwargs, episodes = eval_env
        self.evaluator = Evaluator(env_id, env_kwargs, episodes, settings.seed + 77)
        self.stop_eval_return = stop_eval_return
        self.solved = False

    def warmup(self, state: bytes | None = None) -> dict:
        """Restore a checkpoint if given, warm the networks up, publish the starting weights."""
        if state is not None:
            self.learner.load_state_bytes(state)
        self.learner.warmup()
        self.learner.greedy_actions(np.zeros((1, *self.learner.s.obs_shape), np.float32))
        self.learner.publish_weights()
        return {"device": str(self.learner.device), "precision": self.learner.precision.name,
                "version": self.learner.version, "updates": self.learner.updates}

    def train_epoch(self, evaluate: bool) -> dict | None:
        """One epoch (and an evaluation if asked); None once the stop return was reached."""
        if self.solved:
            return None
        wait_before = self.source.wait_s
        metrics = self.learner.train_epoch()
        waited = self.source.wait_s - wait_before
        metrics["wait_fraction"] = waited / max(metrics["epoch_s"], 1e-9)
        metrics["fill_wait_s"] = self.source.fill_wait_s
        if evaluate:
            returns = self.evaluator.evaluate(self.learner.greedy_actions)
            metrics["eval_return_mean"] = float(returns.mean())
            metrics["eval_return_min"] = float(returns.min())
            if self.stop_eval_return is not None and returns.mean() >= self.stop_eval_return:
                self.solved = True
        return metrics

    def evaluate(self) -> float:
        """Mean greedy return of the current weights over the configured episodes."""
        return float(self.evaluator.evaluate(self.learner.greedy_actions).mean())

    def state_bytes(self) -> bytes:
        """The learner's checkpoint (torch.save bytes)."""
        return self.learner.state_bytes()

    def export_policy(self) -> bytes:
        """The greedy policy as torch.export bytes (policy.pt2)."""
        return self.learner.export_policy()

    def node_id(self) -> str:
        """The Ray node the learner runs on."""
        return ray.get_runtime_context().get_node_id()

    def resend_weights(self, collector) -> None:
        """Announce the latest weights to one collector (after Ray restarted it)."""
        self.publisher.resend(collector)
