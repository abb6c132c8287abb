#!/usr/bin/env bash
# Adds to .gpu/ (built by ../shared/gpu/make-bundle.sh) what that bundle lacks for raypex today:
# ONNX Runtime, which runs the acting graph in collectors and the evaluator, and onnx, which
# torch's exporter needs on the learner, with their dependencies, as one .gpu/extras.tar.xz that
# benchmarks/gpu/checks.sh unpacks beside the bundle's packages. Their tests, data and
# model-tuning tools are left out: the device tool carries 64 MiB in all, and the bundle with
# these is about 61 MB.
#
# Usage, from the project's root with the venv active, after make-bundle.sh:
#   bash benchmarks/gpu/bundle-extras.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
[ -d .gpu ] || { echo "no .gpu/: run ../shared/gpu/make-bundle.sh first" >&2; exit 1; }
ver() { python3 -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$tmp/whl" "onnx==$(ver onnx)" "onnxruntime==$(ver onnxruntime)" \
  ml_dtypes protobuf flatbuffers 2>&1 | grep -v "is ignored" || true
mkdir "$tmp/site"
for wheel in "$tmp"/whl/*.whl; do
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$wheel" "$tmp/site"
done
rm -rf "$tmp/site/onnx/backend/test" "$tmp/site/onnxruntime/transformers" "$tmp/site/onnxruntime/quantization" \
  "$tmp/site/onnxruntime/tools"
tar -C "$tmp/site" -cf - . | xz -T0 -6 > .gpu/extras.tar.xz
du -sh .gpu/extras.tar.xz .gpu
