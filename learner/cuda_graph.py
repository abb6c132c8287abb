"""An algorithm's update captured once as a CUDA graph and replayed for every update.

A small network's update is hundreds of kernel launches; launched one by one from Python the GPU
idles between them. Captured, one `replay` launches them all. The recipe (PyTorch's "whole network
capture"):
1. warm-up updates on a side stream, so cuDNN/cuBLAS pick their algorithms, the optimizer creates
   its state and the allocator settles before capture;
2. every tensor those warm-up updates changed is put back (TrainingStateSnapshot), so the weights,
   Adam's moments and the loss scale are what they were: warm-up trains nothing;
3. the update is captured from static input buffers with gradients set to None, so the first
   micro-batch's backward writes them and the rest add to them (learner/dqn_step.py);
4. each call copies the update's batch into the static buffers (device to device, on the stream
   that replays) and replays.
Anything that replaces those tensors afterwards (optimizer.load_state_dict does) would leave the
graph reading stale ones: the learner captures again after loading a checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

WARMUP_UPDATES = 3


class TrainingStateSnapshot:
    """Copies of every tensor an update changes, put back in place by `restore`.

    `step` is a DQNStep or an ActorCriticStep: anything with `training_tensors()` and
    `optimizers()` (and a `generator`, whose state is put back too). Optimizer state that did not
    exist when the snapshot was taken (a fresh Adam creates its moments at its first step) is zeroed
    on restore: what a fresh Adam starts from.
    """

    def __init__(self, step):
        self.step = step
        self.tensors = step.training_tensors()
        self.copies = [t.detach().clone() for t in self.tensors]
        self.optimizers = step.optimizers()
        self.fresh = [not optimizer.state for optimizer in self.optimizers]
        self.optimizer_copies = [[t.clone() for t in optimizer_state_tensors(o)] for o in self.optimizers]
        generator = getattr(step, "generator", None)
        self.generator_state = generator.get_state() if generator is not None else None

    def restore(self) -> None:
        """Put every snapshotted tensor back, in place; drop gradients."""
        with torch.no_grad():
            torch._foreach_copy_(self.tensors, self.copies)
            for optimizer, fresh, copies in zip(self.optimizers, self.fresh, self.optimizer_copies, strict=True):
                now = optimizer_state_tensors(optimizer)
                if fresh:
                    for tensor in now:
                        tensor.zero_()
                elif now:
                    torch._foreach_copy_(now, copies)
        if self.generator_state is not None:
            self.step.generator.set_state(self.generator_state)
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)


def optimizer_state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's state tensors (Adam's moments and step counts), in parameter order."""
    return [value for group in optimizer.param_groups for p in group["params"]
            for value in optimizer.state.get(p, {}).values() if torch.is_tensor(value)]


class CapturedUpdate:
    """`update` (the device work of `step`'s update) captured over static copies of `example`
    ([G, B, ...] device tensors); calling it with a batch of the same shapes runs one update."""

    def __init__(self, step, update: Callable[[Mapping[str, torch.Tensor]], None], example: Mapping[str, torch.Tensor]):
        self.static = {name: tensor.clone() for name, tensor in example.items()}
        snapshot = TrainingStateSnapshot(step)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_UPDATES):
                update(self.static)
                for optimizer in step.optimizers():
                    optimizer.zero_grad(set_to_none=True)
        torch.cuda.current_stream().wait_stream(side)
        snapshot.restore()  # capture records kernels without running them: restoring first is safe
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: the replay thread's copies to the GPU during capture (collectors inserting
        # while a warm compile cache makes the warm-up short, or a learner revived mid-run) must not
        # invalidate it, as PyTorch's default "global" mode lets them (seen on an H100).
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            update(self.static)
        torch.cuda.synchronize()

    def __call__(self, batch: Mapping[str, torch.Tensor]) -> None:
        """One update from `batch` (device tensors shaped like the example)."""
        for name, buffer in self.static.items():
            buffer.copy_(batch[name], non_blocking=True)
        self.graph.replay()


class CapturedActorCriticUpdate:
    """An ActorCriticStep's update captured twice over static copies of `example`: with the
    actor's step (every policy_delay-th update) and, when policy_delay > 1, without it. Each
    call copies the batch in, draws the update's noise into the static noise buffer (one kernel,
    outside the graph: the graph needs no random generator of its own), replays the graph the
    host's counter chooses and counts the update."""

    def __init__(self, step, example: Mapping[str, torch.Tensor]):
        self.step = step
        self.static = {name: tensor.clone() for name, tensor in example.items()}
        # Allocated, not drawn: a draw here would advance the generator before the snapshot saves it,
        # and every update after capture would get the noise meant for the next one.
        self.noise = torch.empty(step.noise_shape(), device=step.loss_sum.device)
        snapshot = TrainingStateSnapshot(step)
        variants = (True,) if step.s.policy_delay == 1 else (False, True)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_UPDATES):
                for with_actor in variants:
                    step.update(self.static, step.draw_noise(self.noise), with_actor)
        torch.cuda.current_stream().wait_stream(side)
        snapshot.restore()
        self.graphs: dict[bool, torch.cuda.CUDAGraph] = {}
        for with_actor in variants:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                step.update(self.static, self.noise, with_actor)
            self.graphs[with_actor] = graph
        torch.cuda.synchronize()

    def __call__(self, batch: Mapping[str, torch.Tensor]) -> None:
        """One update from `batch` (device tensors shaped like the example)."""
        for name, buffer in self.static.items():
            buffer.copy_(batch[name], non_blocking=True)
        self.step.draw_noise(self.noise)
        with_actor = self.step.with_actor_next()
        self.graphs[with_actor].replay()
        self.step.count(with_actor)
