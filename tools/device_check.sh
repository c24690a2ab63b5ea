#!/usr/bin/env bash
# One prepared check of fsdlite on a lent GPU machine (torch with CUDA, nvcc; no spconv, no registry access).
#
#   bash tools/device_check.sh [OUT_DIR] [--wheels DIR]
#
# Output folder: $OUT when set (the device tool's), else OUT_DIR (default ./device_check_out). --wheels DIR (or
# $DEVICE_CHECK_WHEELS) installs the carried pure-Python wheels in it first (mmengine, mmcv-lite and their
# dependencies; README "GPU" lists them and the command that downloads them). Then, in tools/device_check.py:
# every op family built in parallel for this GPU's architecture, each build smoke-tested (a known invalid call must
# raise, on CPU and CUDA tensors), `pytest -m cuda`, each family's main config trained for 30 iterations on the GPU
# (alongside the tests), the latency benchmark (benchmarks/fsd_latency.py --device cuda), and summary.json +
# summary.md with build.log, pytest.log, train.log and bench.log. Each step is time-limited: the whole check ends
# within 8 minutes on an H100/H200.
#
# FSDLITE_DEVICE=cpu runs the same steps on the CPU with tiny iteration counts (the dry run CI tests); see
# tools/device_check.py for the variables that select steps, families and arguments.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2
OUT_DIR="${OUT:-}"
WHEELS="${DEVICE_CHECK_WHEELS:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) WHEELS="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) [ -z "$OUT_DIR" ] && OUT_DIR="$1"; shift ;;
  esac
done
OUT_DIR="${OUT_DIR:-$REPO/device_check_out}"
mkdir -p "$OUT_DIR" || exit 2
PY="${PYTHON:-python3}"
DEVICE="${FSDLITE_DEVICE:-cuda}"
WORK="${DEVICE_CHECK_WORK:-/tmp/fsdlite_device_check}"
mkdir -p "$WORK"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore DEVICE_CHECK_WORK="$WORK" FSDLITE_DEVICE="$DEVICE"

if [ -n "$WHEELS" ]; then  # carried wheels: no index, no dependencies resolved (the list is complete)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
    "$WHEELS"/*.whl || { echo "device_check: installing the wheels in $WHEELS failed" >&2; exit 2; }
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! "$PY" -c 'import fsdlite.ops' 2>/dev/null; then
  # fsdlite not installed (a bare GPU image): setup.py maps ops/ to fsdlite.ops; a git-ignored link does it here
  ln -sfn ../ops "$REPO/fsdlite/ops"
  export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" -c 'import fsdlite.ops, mmengine' || { echo "device_check: fsdlite or mmengine does not import" >&2; exit 2; }

if [ "$DEVICE" = cuda ]; then
  if [ -z "${CUDA_HOME:-}" ] && command -v nvcc >/dev/null; then  # the toolkit root, not a wrapper's folder
    CUDA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
    export CUDA_HOME
  fi
  TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-$("$PY" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())')}" \
    || { echo "device_check: torch sees no CUDA device (FSDLITE_DEVICE=cpu runs the dry run)" >&2; exit 2; }
  export TORCH_CUDA_ARCH_LIST MAX_JOBS="${MAX_JOBS:-2}"
  export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$WORK/torch_extensions}"
  echo "device_check: CUDA_HOME=${CUDA_HOME:-?} arch $TORCH_CUDA_ARCH_LIST, output in $OUT_DIR"
fi
exec "$PY" tools/device_check.py "$OUT_DIR"
