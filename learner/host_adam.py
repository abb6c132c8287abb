"""HostAdam: Adam for a learner on the CPU, stepped by the same fused kernel as
torch.optim.Adam(fused=True), with its numbers and its checkpoint format, without torch.optim.

Why: torch.optim's `step` imports torch._dynamo on its first call (for a graph break it places for
torch.compile's sake), 1.1-1.4 s on the 2-core box, spent on the way to a CPU learner's first
update (issue 31); a CPU learner never compiles. A GPU learner keeps torch.optim.Adam, capturable
inside its CUDA graphs. `adam_for` picks one of the two.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

BETAS = (0.9, 0.999)  # torch.optim.Adam's defaults, which every learner here uses


class HostAdam:
    """Adam (no weight decay, no amsgrad) over CPU parameters; skips a step on the device when
    `found_inf` (fp16 loss scaling) is 1, as fused torch.optim.Adam does."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float, eps: float):
        self.defaults = {"lr": lr, "betas": BETAS, "eps": eps, "weight_decay": 0, "amsgrad": False,
                         "maximize": False, "foreach": None, "capturable": False, "differentiable": False,
                         "fused": True, "decoupled_weight_decay": False}
        self.param_groups = [{**self.defaults, "params": list(params)}]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}
        self.found_inf: torch.Tensor | None = None

    @property
    def params(self) -> list[torch.Tensor]:
        return self.param_groups[0]["params"]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop (or zero) every parameter's gradient."""
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step of every parameter that has a gradient."""
        params = [p for p in self.params if p.grad is not None]
        if not params:
            return
        for p in params:
            if p not in self.state:
                self.state[p] = {"step": torch.zeros((), dtype=torch.float32),
                                 "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                 "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
        states = [self.state[p] for p in params]
        steps = [s["step"] for s in states]
        group = self.param_groups[0]
        beta1, beta2 = group["betas"]
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(params, [p.grad for p in params], [s["exp_avg"] for s in states],
                           [s["exp_avg_sq"] for s in states], [], steps, amsgrad=False, lr=group["lr"], beta1=beta1,
                           beta2=beta2, weight_decay=0.0, eps=group["eps"], maximize=False, grad_scale=None,
                           found_inf=self.found_inf)
        if self.found_inf is not None:
            torch._foreach_sub_(steps, [self.found_inf] * len(steps))

    def state_dict(self) -> dict:
        """torch.optim.Optimizer.state_dict's layout: state by parameter index, one param group."""
        index = {p: i for i, p in enumerate(self.params)}
        group = {key: value for key, value in self.param_groups[0].items() if key != "params"}
        return {"state": {index[p]: dict(s) for p, s in self.state.items()},
                "param_groups": [{**group, "params": list(range(len(self.params)))}]}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore from `state_dict` output, HostAdam's or torch.optim.Adam's (one param group)."""
        (saved,) = state_dict["param_groups"]
        if len(saved["params"]) != len(self.params):
            raise ValueError(f"optimizer state for {len(saved['params'])} parameters, this one has {len(self.params)}")
        group = self.param_groups[0]
        group.update({key: saved[key] for key in ("lr", "betas", "eps") if key in saved})
        self.state = {}
        for i, s in state_dict["state"].items():
            p = self.params[int(i)]
            self.state[p] = {"step": s["step"].detach().to("cpu", torch.float32).clone().reshape(()),
                             "exp_avg": s["exp_avg"].detach().to(p.device, p.dtype).clone(),
                             "exp_avg_sq": s["exp_avg_sq"].detach().to(p.device, p.dtype).clone()}


def load_optimizer(optimizer, state: dict, lr: float, eps: float) -> None:
    """`optimizer.load_state_dict(state)`, then this run's learning rate and epsilon: a checkpoint
    holds the ones it was trained with, and a resumed run (or an exploited Tune trial) may set new
    ones (torch's load_state_dict would silently keep the saved ones)."""
    optimizer.load_state_dict(state)
    for group in optimizer.param_groups:
        group["lr"], group["eps"] = lr, eps


def adam_for(params: Iterable[torch.Tensor], lr: float, eps: float, device: torch.device):
    """The learner's Adam: fused torch.optim.Adam, capturable, on CUDA; HostAdam on the CPU."""
    if device.type == "cuda":
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True, capturable=True)
    return HostAdam(params, lr, eps)
