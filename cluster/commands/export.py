"""`raypex export RUN --onnx PATH`: a run's policy.pt2 as an ONNX model (learner/onnx_export.py), for
serving it without torch (ONNX Runtime, or any ONNX runner)."""

from __future__ import annotations

import argparse
from pathlib import Path

from raypex.cluster.config.arguments import UsageError
from raypex.cluster.storage import atomic_write, reason


def policy_file(run: Path) -> Path:
    """RUN's policy.pt2: RUN itself when it is one, else the one in the run directory RUN."""
    run = run.resolve()
    if run.is_file():
        if run.suffix != ".pt2":
            raise UsageError(f"{run}: not a policy.pt2 or a run directory")
        return run
    if not run.is_dir():
        raise UsageError(f"{run}: no such run directory")
    if not (run / "policy.pt2").is_file():
        raise UsageError(f"{run}: no policy.pt2 (the run has not finished, or this is not a run directory)")
    return run / "policy.pt2"


def run_export(args: argparse.Namespace) -> int:
    """Write RUN's policy as ONNX to `--onnx PATH` and say what it takes and gives."""
    source = policy_file(args.run)
    from raypex.learner.onnx_export import io_names, onnx_bytes
    from raypex.learner.policy_file import PolicyFileError, load_policy

    try:
        policy = load_policy(source)
    except PolicyFileError as err:
        raise UsageError(str(err)) from None
    target = Path(args.onnx)
    if target.is_dir():
        raise UsageError(f"--onnx {target}: a directory; give the file to write, such as {target / 'policy.onnx'}")
    try:
        atomic_write(target, onnx_bytes(policy))
    except OSError as err:
        raise UsageError(f"--onnx {target}: not written ({reason(err)})") from None
    inputs, outputs = io_names(policy)
    print(f"wrote {target}: {', '.join(inputs)} -> {', '.join(outputs)} (obs [batch, "
          f"{', '.join(map(str, policy.obs_shape))}] float32), from {source}")
    return 0
