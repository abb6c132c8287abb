"""Which device the learner trains on and where collectors act, decided once the cluster is known
(pure logic: the caller passes the alive nodes' resources; no Ray here).

The learner: a GPU when the cluster has one (BENCHMARKS.md (git history), "The learner on its GPU"), unless the
network is an MLP updated eagerly. Collectors: on the GPU for image networks when the learner is on
one and every node has one (issue 30: a Nature CNN forward was half of a CPU collector's time),
each collector reserving a share of a GPU; the learner then reserves the other half of its own.
"""

from __future__ import annotations

import math

from raypex.cluster.config.collectors_section import MIN_GPU_SHARE
from raypex.cluster.config.schema import RunConfig
from raypex.cluster.driver.progress import ProgressLine
from raypex.cluster.driver.run_errors import PlacementError
from raypex.learner.algorithms.registry import algorithm

COLLECTORS_GPU_SHARE = 0.5  # of one GPU, split over the collectors when collectors.num_gpus is auto
LEARNER_GPU_BESIDE_ACTING = 0.5  # what the learner reserves of its GPU when collectors act on GPUs


def choose_device(config: RunConfig, gpus_in_cluster: float, progress: ProgressLine, flat_obs: bool) -> str:
    """'cuda' or 'cpu' for the learner; with learner.device auto, says which and why.

    The rule, from measurements on an H100 box (BENCHMARKS.md (git history), "The learner on its GPU"): with its
    update captured as a CUDA graph even CartPole's 64x64 MLP trains faster on the GPU than on a
    CPU core (1.37M vs 0.12M samples/s) and CartPole solved no slower; launched eagerly, that MLP
    was slower on the GPU (87k samples/s), so an MLP with cuda_graphs off stays on the CPU.
    """
    wanted = config.learner.device
    if wanted == "cuda" and gpus_in_cluster < 1:
        raise PlacementError("learner.device is cuda but the Ray cluster has no GPU; use learner.device=auto or cpu")
    if wanted == "auto":
        if gpus_in_cluster >= 1 and not (flat_obs and config.learner.cuda_graphs == "off"):
            progress.message("learner.device auto: cuda (the cluster has a GPU; the update runs there as one "
                             "captured CUDA graph)")
            return "cuda"
        if gpus_in_cluster >= 1:
            progress.message("learner.device auto: cpu (an MLP updated eagerly, cuda_graphs off, trains faster "
                             "on a CPU core than on the GPU)")
        else:
            progress.message("no GPU in the Ray cluster: the learner runs on CPU")
        if config.learner.precision == "fp16":
            raise PlacementError("learner.precision fp16 needs a GPU and the cluster has none; use bf16 or fp32")
        if config.learner.cuda_graphs == "on":
            raise PlacementError("learner.cuda_graphs on needs a GPU and the cluster has none; use auto or off")
        return "cpu"
    return wanted


def choose_act_device(config: RunConfig, nodes: list[dict[str, float]], learner_device: str, image_obs: bool,
                      progress: ProgressLine) -> str:
    """'cuda' or 'cpu' for the collectors' acting network (collectors.act_device); with auto,
    says which and why when the answer depends on the cluster."""
    wanted = config.collectors.act_device
    served = config.collectors.acting == "served"
    if wanted == "cpu":
        return "cpu"
    without = [i for i, n in enumerate(nodes) if n.get("CPU", 0.0) > 0 and not n.get("GPU", 0.0)]
    if wanted == "cuda":
        if not any(n.get("GPU", 0.0) > 0 for n in nodes):
            raise PlacementError("collectors.act_device is cuda but the Ray cluster has no GPU; use auto or cpu")
        if served and without:  # a collector there would have no server: it must sit beside a GPU
            raise PlacementError(f"collectors.acting served with act_device cuda puts an acting server on the GPU of "
                                 f"each collector's node, and {len(without)} of the cluster's {len(nodes)} nodes have "
                                 "none; use act_device auto or cpu")
        return "cuda"
    if not algorithm(config.algo.name).acts_on_gpu or not image_obs or learner_device != "cuda":
        return "cpu"  # MLPs act faster on their core than through a GPU launch
    if config.collectors.elastic:  # a GPU share per collector is reserved with the run, for a fixed number
        return "cpu"
    if without:
        progress.message(f"collectors.act_device auto: cpu ({len(without)} of the cluster's {len(nodes)} nodes have "
                         "no GPU; collectors.act_device=cuda keeps every collector on GPU nodes)")
        return "cpu"
    who = "each node's acting server" if served else "each collector"
    progress.message(f"collectors.act_device auto: cuda (an image network and a GPU on every node; {who} "
                     f"reserves {collector_gpu_share(config):g} GPU)")
    return "cuda"


def collector_gpu_share(config: RunConfig) -> float:
    """The GPU share each collector acting on a GPU reserves, or with served acting each node's
    acting server: collectors.num_gpus, or with auto half a GPU, split over the collectors (the
    server acts for all of its node's), rounded down to Ray's finest fraction."""
    share = config.collectors.num_gpus
    if share == "auto":
        split = 1 if config.collectors.acting == "served" else config.collectors.shards
        share = round(math.floor(COLLECTORS_GPU_SHARE / split / MIN_GPU_SHARE) * MIN_GPU_SHARE, 4)
    return max(float(share), MIN_GPU_SHARE)


def gpu_requests(config: RunConfig, learner_device: str, act_device: str) -> tuple[float, float, float]:
    """(the learner's GPUs, each collector's, each node's acting server's) to ask Ray for: the
    acting share goes to each collector acting on a GPU, or with served acting to each node's
    acting server, whose collectors then ask for none."""
    acting_share = collector_gpu_share(config) if act_device == "cuda" else 0.0
    served = config.collectors.acting == "served"
    collector, server = (0.0, acting_share) if served else (acting_share, 0.0)
    if learner_device != "cuda":
        return 0.0, collector, server
    return (LEARNER_GPU_BESIDE_ACTING if acting_share else 1.0), collector, server


def with_act_device(config: RunConfig, act_device: str) -> RunConfig:
    """`config` with collectors.act_device resolved ('cpu' or 'cuda') and, for cuda, num_gpus the
    share each collector reserves: what the run's actors are built from (the run directory's
    config.yaml keeps the user's auto, so a resumed run decides again on its cluster)."""
    share = collector_gpu_share(config) if act_device == "cuda" else config.collectors.num_gpus
    collectors = config.collectors.model_copy(update={"act_device": act_device, "num_gpus": share})
    return config.model_copy(update={"collectors": collectors})
