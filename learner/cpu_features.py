"""What this machine's CPU runs natively, read from /proc/cpuinfo without importing torch (the
collectors' hosts ask before deciding whether torch is needed at all)."""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache
def cpu_has_bf16_units() -> bool:
    """Whether this CPU runs bf16 matrix products natively (x86 AVX512-BF16 or AMX, read from
    /proc/cpuinfo). False where that cannot be read (other systems): fp32 is never the slow
    choice, bf16 without the units is."""
    try:
        return bf16_units_in(Path("/proc/cpuinfo").read_text())
    except OSError:
        return False


def bf16_units_in(cpuinfo: str) -> bool:
    """Whether /proc/cpuinfo's text lists a bf16 matrix instruction set among its CPU's flags."""
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    return "avx512_bf16" in flags or "amx_bf16" in flags
