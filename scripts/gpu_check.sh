#!/usr/bin/env bash
# The GPU check: one prepared run on a lent GPU machine, at most 8 minutes; its tables land in $OUT.
#
#   Here, once (the GPU machine reaches no package registry):
#     bash scripts/gpu_check.sh --fetch-wheels      # cp312 wheels of pymetis and mpich -> scripts/gpu_wheels/
#   There (a device run as root, carrying scripts/gpu_wheels):
#     bash scripts/gpu_check.sh
#
# That machine's python3 is itself a virtualenv (/opt/torch/.venv) holding torch (CUDA), torch_geometric,
# triton, numba, scipy, networkx, tqdm, psutil, pytest-xdist and mpi4py (built for Open MPI). A venv made
# from it with --system-site-packages does not see torch (measured), so nothing is nested: the carried wheels
# go into python3's own environment (mpiexec then sits beside python3, where the tests look for it, and mpi4py
# loads MPICH), and this checkout is installed there with --no-deps --no-build-isolation.
#
# Steps, each under its own time limit, most important first (about 7.5 minutes in all); at most 8 files:
#   env.txt       GPU, driver, torch, triton and CUDA versions; cores
#   test_gpu.txt  tests/test_gpu.py: device codecs, compiled Triton kernels against the CPU's bits, the
#                 side-stream exchange, P=2 and P=4 sharing the GPU against P=1, typed and dynamic models
#                 against PyG on the device
#   codec.txt     codec and keyed-dropout throughput on the device against a device copy and F.dropout
#   scale.txt     bench_scale's CUDA rows at 1M nodes: PyG adj_t and edge_index against gnn-dist P=1
#   multirank.txt P=1, 2 and 4 sharing the GPU (200k-node SBM): epoch ratios and loss differences to P=1
# The suite's multi-rank tests on that machine as it is (CUDA visible, 16 cores) do not fit beside them:
#   bash scripts/gpu_check.sh suite      # a second call, about 4 minutes: suite.txt
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
WHEELS="$HERE/scripts/gpu_wheels"
if [ "${1:-}" = "--fetch-wheels" ]; then
  mkdir -p "$WHEELS"
  for plat in manylinux_2_28_x86_64 manylinux2014_x86_64; do
    python3 -m pip download -q --only-binary=:all: --no-deps --python-version 3.12 --implementation cp \
      --platform "$plat" -d "$WHEELS" pymetis mpich 2>/dev/null && break
  done
  ls -l "$WHEELS"
  exit 0
fi
OUT=${OUT:-$HERE/gpu_check_out}
mkdir -p "$OUT"
cd "$HERE"
START=$(date +%s)
PY=python3
export PYTHONUNBUFFERED=1 PYTHONPATH="$HERE"

step() {  # step NAME SECONDS COMMAND...: output to $OUT/NAME.txt, its tail here
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s, $(( $(date +%s) - START ))s elapsed)"
  timeout -k 5 "$limit" "$@" > "$OUT/$name.txt" 2>&1
  echo "exit $?" >> "$OUT/$name.txt"
  tail -n "${TAIL:-30}" "$OUT/$name.txt"
}

setup() {
  "$PY" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check "$WHEELS"/*.whl || return 1
  # the tests run `python -m gnn_dist` from this checkout (PYTHONPATH), so a failed editable install only costs
  # the `gnn-dist` command
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --disable-pip-version-check -e "$HERE" ||
    echo "note: the editable install failed; running from the checkout"
  "$PY" -c "import gnn_dist, pymetis, torch; from mpi4py import MPI; print('ok', torch.__version__, \
MPI.Get_library_version().splitlines()[0])"
  ls -l "$(dirname "$(command -v "$PY")")/mpiexec"
}
export PY WHEELS HERE
export -f setup  # `timeout` runs programs, not shell functions
step setup 60 bash -c setup >/dev/null
tail -n 4 "$OUT/setup.txt"

step env 15 bash -c "nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; \
nproc; $PY -c \"import torch, torch_geometric, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'pyg', torch_geometric.__version__, 'triton', triton.__version__, 'gpus', torch.cuda.device_count())\""
if [ "${1:-}" = "suite" ]; then
  step suite 230 "$PY" -m pytest -q -p no:cacheprovider -m slow -n 4 -rfE --timeout 200 tests
else
  step test_gpu 120 "$PY" -m pytest -q -p no:cacheprovider -rfEs tests/test_gpu.py
  step codec 40 "$PY" scripts/bench_codec.py --device cuda --rows 1000000 --width 128
  TAIL=40 step scale 140 "$PY" scripts/bench_scale.py --device cuda --ranks 1 --epochs 5
  step multirank 80 "$PY" scripts/gpu_multirank.py --epochs 10
fi
echo "== done in $(( $(date +%s) - START ))s; files in $OUT"
