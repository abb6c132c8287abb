"""The acting precision a collector's machine decides before any network is built (no Ray here:
the collector's host and the bench's one-process env_policy stage both ask)."""

from __future__ import annotations

import dataclasses

from raypex.actors.settings import CollectorSettings
from raypex.learner.cpu_features import cpu_has_bf16_units


def act_precision_for_this_cpu(settings: CollectorSettings) -> CollectorSettings:
    """The settings with `act_precision: auto` made fp32 where this node's CPU has no bf16 units:
    emulated bf16 is never the faster form there (the Nature CNN at 32 envs, AVX2-only EPYC: 140-168
    ms a forward against 11 ms in fp32), and timing it cost each Atari collector 1.4-1.75 s of its
    start. Elsewhere the collector times both, as before; GPU acting is not the CPU's to decide."""
    if settings.act_device == "cpu" and settings.act_precision == "auto" and not cpu_has_bf16_units():
        return dataclasses.replace(settings, act_precision="fp32")
    return settings
