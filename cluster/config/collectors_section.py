"""The collectors section of the run config: how many collector actors, their exploration, how
they push chunks and how and where they act (CPU forms, or a share of a GPU)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from raypex.cluster.config.section import Section, on_off_from_yaml_bools

MIN_GPU_SHARE = 1e-4  # the finest GPU fraction Ray allots


class CollectorsConfig(Section):
    """The collector actors: how many, their exploration and how they push data."""

    num: int | Literal["auto"] = Field(
        2, description="Collector actors (each with its own shard); auto = follow the cluster: per_node collectors on "
        "every node with room for them, up to max, started on a node that joins within seconds and stopped on one "
        "that is drained (its last chunks stored first). The Ray runtime only.")
    max: int | None = Field(
        None, ge=1, le=1024, description="With num auto: the most collectors at once, and the replay's shards (each "
        "replay.capacity transitions: a collector that joins takes a free one), so the replay never holds more than "
        "replay.capacity x max; above the cluster's room, Ray's autoscaler is asked for their CPUs.")
    per_node: int = Field(1, ge=1, le=1024, description="With num auto: collectors on each node that has room for them.")
    num_cpus: float = Field(0.4, gt=0.0, description="CPUs Ray reserves per collector.")
    chunk_steps: int = Field(16, ge=1, description="Vector steps folded into one pushed chunk.")
    max_pushes_in_flight: int = Field(2, ge=1, description="Chunk writes a collector may have pending.")
    come_back_s: float = Field(
        30.0, gt=0.0, description="How long Ray may take to bring a dead collector back (its node lost, no other "
        "with room for it) before the run goes on without it, in one line.")
    epsilon_base: float = Field(0.4, ge=0.0, le=1.0, description="Ape-X eps_base.")
    epsilon_alpha: float = Field(7.0, ge=0.0, description="Ape-X alpha: eps_i = base^(1+alpha*i/(N-1)).")
    epsilon_anneal_steps: int = Field(
        0, ge=0, description="Env steps (per collector) to anneal from 1.0 down to eps_i; 0 = none."
    )
    act_precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="Dtype of the acting network: auto = bf16 where this CPU runs it at least 1.1x "
        "faster than fp32 (timed when each collector starts; a CPU without AVX512-BF16 or AMX gets fp32 "
        "untimed), else fp32. An MLP (flat observations) runs the acting graph in ONNX Runtime with auto or "
        "fp32, so collectors never import torch."
    )
    act_fusion: Literal["auto", "on", "off"] = Field(
        "auto", description="Run the acting forward as a TorchScript trace with oneDNN Graph fusion: auto = for "
        "image networks where it is at least 1.1x faster than eager (timed when each collector starts)."
    )
    act_device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where collectors run their acting network: auto = the GPU for image networks when the "
        "learner trains on a GPU and every node of the cluster has one (each collector then asks Ray for num_gpus of "
        "it; with acting served, each node's acting server does), else the CPU. cuda: one host-to-device copy of "
        "each vector step's observations, one forward, actions back (acting local: dqn only, since td3, sac and "
        "r2d2 run the acting graph on the CPU, in ONNX Runtime)."
    )
    acting: Literal["local", "served"] = Field(
        "local", description="Who runs the acting network: local = each collector, in its own process; served = one "
        "acting server per node, which runs one forward for the requests of every collector on that node (each "
        "collector keeps its own exploration, random stream and recurrent state, so it chooses the actions it "
        "would locally). The server runs the acting graph on the node's CPU, or with act_device cuda the plug-in's "
        "module on the node's GPU, each padded batch shape captured as a CUDA graph."
    )
    num_gpus: float | Literal["auto"] = Field(
        "auto", description="GPU share Ray reserves per collector acting on a GPU (acting served: per node's acting "
        "server); auto = half a GPU split over the collectors, or half a GPU for each server (the learner takes "
        "the other half of its GPU)."
    )
    _act_fusion_on_off = field_validator("act_fusion", mode="before")(on_off_from_yaml_bools)

    @field_validator("num_gpus")
    @classmethod
    def _gpu_share(cls, value: Any) -> Any:
        if value != "auto" and not MIN_GPU_SHARE <= value <= 1.0:
            raise ValueError(f"must be auto or a share of one GPU from {MIN_GPU_SHARE:g} to 1")
        return value

    @field_validator("num", mode="before")
    @classmethod
    def _a_count(cls, value: Any) -> Any:
        if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024):
            raise ValueError("must be auto or a whole number from 1 to 1024")
        return value

    @property
    def elastic(self) -> bool:
        """Whether the collectors follow the cluster (num auto)."""
        return self.num == "auto"

    @property
    def shards(self) -> int:
        """The replay's shards: one per collector, or with num auto one per collector it may have at once."""
        return self.max if self.elastic else self.num

    @model_validator(mode="after")
    def _elastic_has_a_bound(self) -> CollectorsConfig:
        if self.elastic and self.max is None:
            raise ValueError("num auto needs max: the most collectors at once (each has a shard of its own)")
        if not self.elastic and self.max is not None:
            raise ValueError(f"max is for num auto; num {self.num} starts {self.num} collectors (drop max, or set num auto)")
        return self

    @model_validator(mode="after")
    def _fusion_is_for_cpus(self) -> CollectorsConfig:
        if self.act_device == "cuda" and self.act_fusion == "on":
            raise ValueError("act_fusion on is oneDNN's, for CPUs; with act_device cuda use auto or off")
        return self
