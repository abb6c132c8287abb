"""A group of learners' torch.distributed process group, formed by whoever started them: gloo on
the host, NCCL for CUDA gradients (`backend_for`; not yet run on GPUs).

The first learner opens a TCP store on a free port of its host (`open_store`); every learner, the
first too, then `join`s with the store's address, its rank and its own host's address, and gloo
connects them pairwise over the interface that carries that address (on a machine with several,
or in a Linux network namespace, gloo would otherwise pick one by the hostname). A collective that waits longer
than GROUP_TIMEOUT_S raises: a learner of the group died or its host left, and the group is
formed again from a checkpoint (cluster/hosts/learner_group.py). No Ray here.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch.distributed as dist

from raypex.learner.gradient_group import GradientGroup

GROUP_TIMEOUT_S = 60.0


def interface_of(host: str) -> str | None:
    """The name of this machine's network interface that has address `host` (None: none has)."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address == host for a in addresses):
            return name
    return None


def open_store(host: str, learners: int) -> tuple[dist.TCPStore, int]:
    """The first learner's store for forming a group of `learners`, on a free port of `host`:
    (the store, its port). It does not wait for the others."""
    store = dist.TCPStore(host, 0, learners, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=GROUP_TIMEOUT_S))
    return store, store.port


def backend_for(device_type: str) -> str:
    """torch.distributed's backend for learners on `device_type`: gloo for what is on the host (the
    replay's figures every update, a CPU learner's gradients), NCCL for CUDA gradients."""
    return "cpu:gloo,cuda:nccl" if device_type == "cuda" else "gloo"


def join(store_host: str, port: int, rank: int, learners: int, own_host: str, device_type: str = "cpu",
         store: dist.TCPStore | None = None) -> GradientGroup:
    """Join the group whose store is at `store_host`:`port` as learner `rank` of `learners`, gloo
    talking from `own_host`, this learner's address (returns once every learner has joined), its
    gradients on `device_type`. A group this process was in before is left first. `store`: the
    first learner's own (open_store), which it joins through."""
    if dist.is_initialized():
        dist.destroy_process_group()
    interface = interface_of(own_host)
    if interface is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = interface
    if store is None:
        store = dist.TCPStore(store_host, port, learners, is_master=False,
                              timeout=timedelta(seconds=GROUP_TIMEOUT_S))
    dist.init_process_group(backend_for(device_type), store=store, rank=rank, world_size=learners,
                            timeout=timedelta(seconds=GROUP_TIMEOUT_S))
    return GradientGroup()
