#!/usr/bin/env bash
# The GPU checks, in one run: what a session lent a GPU (device `status`: can_start_another true)
# runs first, before anything else takes device time. Built for the device tool's limits: one
# command of at most 600 s, files back from $OUT. From the project root, with .gpu/ built by
# ../shared/gpu/make-bundle.sh, then benchmarks/gpu/bundle-extras.sh (ONNX Runtime and onnx), and carried:
#
#   run(command="source .gpu/setup.sh && bash benchmarks/gpu/checks.sh", carry=[".gpu"], timeout_s=560)
#
# Each step has its own time limit and writes its own log under $OUT (default ./gpu-out); a step
# that fails is reported and the next one runs. The figures go to docs/results.md with the
# date and the machine (`nvidia-smi -L`, in summary.txt).
#   1. correctness: the captured DQN/TD3/SAC updates (compiled too) against eager (tests/test_cuda_learner.py), and a
#      GPU acting server's captured forwards against the module on the CPU (tests/test_served_acting.py)
#   2. captured update rates, learner alone: DQN (Pong's CNN), TD3 and SAC (Pendulum's MLPs)
#   3. acting: Pong's 12 collectors acting each on the GPU, each on its CPU, and served by the node's
#      acting server on the GPU (collect stage)
#   4. Pong seed 2: the config's run for what is left of the budget, its curve in TensorBoard
set -uo pipefail
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
SUMMARY="$OUT/summary.txt"
if [ ! -d /tmp/gpu-site/onnxruntime ]; then  # the acting graph's runtime, beside the bundle's packages
  tar -xJf .gpu/extras.tar.xz -C /tmp/gpu-site || { echo "no .gpu/extras.tar.xz: run benchmarks/gpu/bundle-extras.sh"; exit 1; }
fi
{ date -u '+%Y-%m-%d %H:%M:%S UTC'; nvidia-smi -L 2>&1; git rev-parse --short HEAD 2>/dev/null; } > "$SUMMARY"

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $OUT/NAME.log, one summary line
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout --signal=INT --kill-after=20 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local code=$?
  echo "$name: exit $code after $((SECONDS - start)) s" | tee -a "$SUMMARY"
}

step correctness 180 python -m pytest -q -x tests/test_cuda_learner.py tests/test_served_acting.py
step rates_dqn 70 python -m benchmarks.learner_matrix configs/pong.yaml --seconds 1.5 --graphs on,off \
  --shapes 512x4 --json "$OUT/rates_dqn.json"
step rates_td3 50 python -m benchmarks.learner_matrix configs/pendulum.yaml algo.name=td3 --seconds 1.5 \
  --graphs on,off --json "$OUT/rates_td3.json"
step rates_sac 50 python -m benchmarks.learner_matrix configs/pendulum.yaml algo.name=sac --seconds 1.5 \
  --graphs on,off --json "$OUT/rates_sac.json"
step acting_gpu 60 raypex bench configs/pong.yaml --stage collect --quick collectors.num=12 learner.num_cpus=4
step acting_cpu 60 raypex bench configs/pong.yaml --stage collect --quick collectors.num=12 learner.num_cpus=4 \
  collectors.act_device=cpu
step acting_served 60 raypex bench configs/pong.yaml --stage collect --quick collectors.num=12 learner.num_cpus=4 \
  collectors.acting=served
LEFT=$((540 - SECONDS))
if [ "$LEFT" -gt 60 ]; then
  # SIGINT ends the run as a stop does: summary.json and the TensorBoard curve so far
  step pong_seed2 "$LEFT" raypex train configs/pong.yaml --seed 2 --run-dir "$OUT/pong2" collectors.num=12 \
    learner.num_cpus=4
  cp "$OUT/pong2/summary.json" "$OUT/pong2-summary.json" 2>/dev/null
  python - "$OUT/pong2" > "$OUT/pong2-curve.txt" 2>&1 <<'PY'
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
events = EventAccumulator(f"{sys.argv[1]}/tensorboard", size_guidance={"scalars": 0}).Reload()
for tag in ("eval/return_mean", "collector/episode_return_mean", "perf/env_steps_per_s"):
    if tag in events.Tags()["scalars"]:
        print(tag, [(s.step, round(s.value, 2)) for s in events.Scalars(tag)])
PY
  rm -rf "$OUT/pong2"  # its files are more than the device tool brings back
fi
cat "$SUMMARY"
