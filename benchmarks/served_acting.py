"""`python -m benchmarks.served_acting [--collectors 2,4,8] [--window S] [--configs cartpole,minatar]`:
the collect stage of `raypex bench` with collectors.acting local and served, side by side.

For each config and number of collectors it runs `raypex bench CONFIG --stage collect` twice, local
then served (a fresh local Ray cluster each), every collector at 0.1 CPU so that 8 fit two cores,
and prints one markdown table: env steps/s collected (collect), what one collector steps acting in
its own process (env_policy, the same in both), and how many collectors' requests each forward of
the acting servers answered.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

COLLECTOR_CPUS = 0.1


def bench_rows(config: str, collectors: int, acting: str, window: float) -> dict[str, float]:
    """The rows of one `raypex bench --stage collect`, by name."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "bench.json"
        command = [sys.executable, "-m", "raypex", "bench", f"configs/{config}.yaml", "--stage", "collect",
                   "--window", str(window), "--json", str(out), f"collectors.num={collectors}",
                   f"collectors.num_cpus={COLLECTOR_CPUS}", f"collectors.acting={acting}"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
        return {row["name"]: row["value"] for row in json.loads(out.read_text())["rows"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collectors", default="2,4,8")
    parser.add_argument("--window", type=float, default=5.0, help="seconds of each measuring window")
    parser.add_argument("--configs", default="cartpole,minatar")
    args = parser.parse_args()
    print("| config | collectors | local collect (env steps/s) | served collect (env steps/s) | served / local "
          "| requests per forward | env_policy, one collector |")
    print("|---|---|---|---|---|---|---|")
    for config in args.configs.split(","):
        for collectors in (int(n) for n in args.collectors.split(",")):
            local = bench_rows(config, collectors, "local", args.window)
            served = bench_rows(config, collectors, "served", args.window)
            print(f"| {config} | {collectors} | {local['collect']:,.0f} | {served['collect']:,.0f} "
                  f"| {served['collect'] / local['collect']:.2f} | {served['acting_requests_per_forward']:.2f} "
                  f"| {local['env_policy']:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
