#!/usr/bin/env bash
# The GPU check: one prepared run on a lent GPU machine, at most 8 minutes; its tables land in $OUT.
#
#   Here, once (the GPU machine reaches no package registry):
#     bash scripts/gpu_check.sh --fetch-wheels      # cp312 wheels of pymetis and mpich -> scripts/gpu_wheels/
#   There (device run, carrying scripts/gpu_wheels):
#     bash scripts/gpu_check.sh
#
# The machine has python3 3.12 with torch (CUDA), torch_geometric, numba, scipy, networkx, tqdm, psutil and
# mpi4py. A venv that sees those packages gets the wheels and this checkout (--no-deps), so mpiexec sits
# beside its python as the tests expect. Steps, each with its own time limit (about 7 minutes in all):
#   env.txt      GPU, driver, torch and CUDA versions
#   test_gpu.txt tests/test_gpu.py (codecs on the device, the side-stream exchange, NCCL against gloo)
#   codec.txt    codec throughput on the device (scripts/bench_codec.py --device cuda)
#   scale.txt    bench_scale's CUDA rows at 1M nodes: gnn-dist P=1 against PyG's sparse adj_t, both on the GPU
#   nccl.txt     `mpiexec -n 1 gnn-dist train --backend nccl` on Cora: an NCCL world of one
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
WHEELS="$HERE/scripts/gpu_wheels"
if [ "${1:-}" = "--fetch-wheels" ]; then
  mkdir -p "$WHEELS"
  for plat in manylinux_2_28_x86_64 manylinux2014_x86_64; do
    python3 -m pip download -q --only-binary=:all: --no-deps --python-version 3.12 --platform "$plat" \
      -d "$WHEELS" pymetis mpich 2>/dev/null && break
  done
  ls -l "$WHEELS"
  exit 0
fi
OUT=${OUT:-$HERE/gpu_check_out}
mkdir -p "$OUT"
cd "$HERE"
START=$(date +%s)

step() {  # step NAME SECONDS COMMAND...: output to $OUT/NAME.txt, its tail here
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s, $(( $(date +%s) - START ))s elapsed)"
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  echo "exit $?" >> "$OUT/$name.txt"
  tail -n 40 "$OUT/$name.txt"
}

VENV=/tmp/gnn-dist-gpu-venv
setup() {
  python3 -m venv --system-site-packages "$VENV" || return 1
  local py="$VENV/bin/python"
  "$py" -c "import pymetis" 2>/dev/null || "$py" -m pip install -q --no-index --no-deps "$WHEELS"/pymetis-*.whl
  if [ ! -x "$VENV/bin/mpiexec" ]; then  # the mpich wheel brings mpiexec and the library mpi4py loads
    "$py" -m pip install -q --no-index --no-deps "$WHEELS"/mpich-*.whl
  fi
  "$py" -m pip install -q --no-index --no-deps --no-build-isolation -e "$HERE" 2>/dev/null || {
    printf '#!/bin/sh\nexec %s -m gnn_dist "$@"\n' "$py" > "$VENV/bin/gnn-dist" && chmod +x "$VENV/bin/gnn-dist"
  }
  "$py" -c "import gnn_dist, pymetis, torch; from mpi4py import MPI; print('ok', torch.__version__)"
}
step setup 90 setup
PY="$VENV/bin/python"
export PYTHONPATH="$HERE" PATH="$VENV/bin:$PATH"

step env 20 bash -c "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $PY -c \"import torch, \
torch_geometric; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'pyg', torch_geometric.__version__, \
'gpus', torch.cuda.device_count())\""
step test_gpu 120 "$PY" -m pytest -q -p no:cacheprovider tests/test_gpu.py
step codec 30 "$PY" scripts/bench_codec.py --device cuda --rows 1000000 --width 128
step scale 210 "$PY" scripts/bench_scale.py --device cuda --ranks 1 --skip-edge-index --epochs 5
step nccl 60 bash -c "gnn-dist partition --dataset cora --parts 1 --out /tmp/gpu-cora-1 --force && \
mpiexec -n 1 gnn-dist train --partition /tmp/gpu-cora-1 --backend nccl --epochs 50 --quiet"
echo "== done in $(( $(date +%s) - START ))s; tables in $OUT"
