#!/usr/bin/env bash
# bench/gpu/run.sh: the whole real-GPU validation on a machine with an NVIDIA GPU, PyTorch and
# nvidia-cuda-mps-control: starts gpupack's server and agent (process runtime, NVML, the agent's own MPS
# daemon), runs bench/gpu/workload.py as gpupack tasks through RunTask (bench/gpu/run.py), and writes
# docs/gpu-validation.md (bench/gpu/report.py, then the hand-written bench/gpu/analysis.md).
#
#   bench/gpu/run.sh [run.py options, e.g. --only memory,compute --seconds 6]
#   bench/gpu/run.sh --runtime docker --docker-socket SOCK [...]   the same scenarios in containers (the agent's
#        docker runtime; bench/gpu/engine.sh starts an engine); results go to bench/gpu/out-docker and its report to
#        bench/gpu/out-docker/report.md (docs/gpu-validation.md keeps the process run and quotes the container one).
#
# Environment: GPUPACK_BIN (default build/gpupack), GPUPACK_GPU_WORK (scratch, default /tmp/gpupack-gpu: wiped),
# GPUPACK_GPU_OUT (results, default bench/gpu/out, or bench/gpu/out-docker with --runtime docker).
# It never changes a GPU setting and quits every MPS daemon it started; it needs no network.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bin=${GPUPACK_BIN:-build/gpupack}
work=${GPUPACK_GPU_WORK:-/tmp/gpupack-gpu}
runtime=process prev=
for arg in "$@"; do [[ $prev == --runtime ]] && runtime=$arg; [[ $arg == --runtime=* ]] && runtime=${arg#*=}; prev=$arg; done
if [[ $runtime == docker ]]; then out=${GPUPACK_GPU_OUT:-bench/gpu/out-docker}; else out=${GPUPACK_GPU_OUT:-bench/gpu/out}; fi
command -v nvidia-smi >/dev/null || { echo "run.sh: no nvidia-smi: this needs a machine with an NVIDIA GPU" >&2; exit 2; }
command -v nvidia-cuda-mps-control >/dev/null || { echo "run.sh: nvidia-cuda-mps-control is not on PATH" >&2; exit 2; }
[[ -x $bin ]] || { echo "run.sh: $bin is not built (cmake --build build --target gpupack)" >&2; exit 2; }
rm -rf "$work" && mkdir -p "$work" "$out"
export PYTHONUNBUFFERED=1
status=0
python3 bench/gpu/run.py --gpupack "$bin" --work "$work" --out "$out" "$@" || status=$?
if [[ $runtime == docker ]]; then
  python3 bench/gpu/report.py "$out/results.json" "$out/report.md"
  echo "run.sh: wrote $out/report.md from $out/results.json (run.py exit $status)"
  exit $status
fi
python3 bench/gpu/report.py "$out/results.json" docs/gpu-validation.md
[[ -f bench/gpu/analysis.md ]] && cat bench/gpu/analysis.md >> docs/gpu-validation.md
echo "run.sh: wrote docs/gpu-validation.md from $out/results.json (run.py exit $status)"
exit $status
