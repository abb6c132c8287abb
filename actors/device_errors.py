"""Errors about where a collector acts, importable without torch (the driver catches them)."""


class NoGpuHere(RuntimeError):
    """Acting on a GPU was asked for in a process that sees none (one line, naming CUDA_VISIBLE_DEVICES)."""
