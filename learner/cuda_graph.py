"""An UpdateStep captured once as a CUDA graph and replayed for every update.

A small network's update is hundreds of kernel launches; launched one by one from Python the GPU
idles between them. Captured, one `replay` launches them all. The recipe (PyTorch's "whole network
capture"):
1. warm-up updates on a side stream, so cuDNN/cuBLAS pick their algorithms, the optimizer creates
   its state and the allocator settles before capture;
2. every tensor those warm-up updates changed is put back (TrainingStateSnapshot), so the weights,
   Adam's moments and the loss scale are what they were: warm-up trains nothing;
3. the update is captured from static input buffers with gradients set to None, so the first
   micro-batch's backward writes them and the rest add to them (update_step.py);
4. each call copies the update's batch into the static buffers (device to device, on the stream
   that replays) and replays.
Anything that replaces those tensors afterwards (optimizer.load_state_dict does) would leave the
graph reading stale ones: the learner captures again after loading a checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from learner.update_step import UpdateStep

WARMUP_UPDATES = 3


class TrainingStateSnapshot:
    """Copies of every tensor an update changes, put back in place by `restore`.

    Optimizer state that did not exist when the snapshot was taken (a fresh Adam creates its
    moments at its first step) is zeroed on restore: what a fresh Adam starts from.
    """

    def __init__(self, step: UpdateStep):
        self.step = step
        self.tensors = self._training_tensors()
        self.copies = [t.detach().clone() for t in self.tensors]
        self.fresh_optimizer = not step.optimizer.state
        self.optimizer_copies = [t.clone() for t in self._optimizer_tensors()]

    def _training_tensors(self) -> list[torch.Tensor]:
        step = self.step
        scaler = step.precision.scaler
        scaler_tensors = [scaler.scale, scaler.growth_tracker, scaler.found_inf] if scaler is not None else []
        return [*step.params, *step.target_params, *scaler_tensors, step.loss_sum, step.q_sum]

    def _optimizer_tensors(self) -> list[torch.Tensor]:
        state = self.step.optimizer.state
        return [value for p in self.step.params for value in state.get(p, {}).values() if torch.is_tensor(value)]

    def restore(self) -> None:
        """Put every snapshotted tensor back, in place; drop gradients."""
        with torch.no_grad():
            torch._foreach_copy_(self.tensors, self.copies)
            now = self._optimizer_tensors()
            if self.fresh_optimizer:
                for tensor in now:
                    tensor.zero_()
            else:
                torch._foreach_copy_(now, self.optimizer_copies)
        self.step.optimizer.zero_grad(set_to_none=True)


class CapturedUpdate:
    """`step` captured over static copies of `example` ([G, B, ...] device tensors); calling it
    with a batch of the same shapes runs one update."""

    def __init__(self, step: UpdateStep, example: Mapping[str, torch.Tensor]):
        self.static = {name: tensor.clone() for name, tensor in example.items()}
        snapshot = TrainingStateSnapshot(step)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_UPDATES):
                step(self.static)
                step.optimizer.zero_grad(set_to_none=True)
        torch.cuda.current_stream().wait_stream(side)
        snapshot.restore()  # capture records kernels without running them: restoring first is safe
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            step(self.static)
        torch.cuda.synchronize()

    def __call__(self, batch: Mapping[str, torch.Tensor]) -> None:
        """One update from `batch` (device tensors shaped like the example)."""
        for name, buffer in self.static.items():
            buffer.copy_(batch[name], non_blocking=True)
        self.graph.replay()
