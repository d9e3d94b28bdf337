"""What an emulated host gets: its CPU share and a sparse product's rate, timed inside it.

    sudo python scripts/netlab.py up --hosts 4 --rate none --cores-per-host 0.45 --keep-awake
    sudo python scripts/netlab.py run -- .venv/bin/python scripts/host_share.py
    sudo python scripts/netlab.py down

Each host times a 128-wide sparse product (100,000 rows of 10 random columns among rows twice the cache,
as `profile-machine` times reads from memory) on one thread for `--seconds`, `--samples` times, and prints
its CPU seconds over wall seconds (the share of a core it got: its quota, where nothing takes it away) and
the product's rate per CPU second (what a core does for it). docs/benchmarks.md, "The spinners' group".
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0, help="one sample's length")
    ap.add_argument("--samples", type=int, default=3)
    a = ap.parse_args()
    import torch

    from gnn_dist.cli.core_rates import cache_bytes
    from gnn_dist.graph.local import spmm
    from gnn_dist.runtime.cgroups import usable_cpus

    torch.set_num_threads(1)
    rows, degree, width = 100_000, 10, 128
    among = max(rows, 2 * (cache_bytes() or 32 << 20) // (4 * width))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note that sparse CSR is in beta
        a_ = torch.sparse_csr_tensor(torch.arange(0, rows * degree + 1, degree), torch.randint(0, among, (rows * degree,)),
                                     torch.rand(rows * degree), (rows, among))
    x = torch.randn(among, width)
    spmm(a_, x)
    out = []
    for _ in range(a.samples):
        wall, cpu, calls = time.perf_counter(), time.thread_time(), 0
        while time.perf_counter() - wall < a.seconds:
            spmm(a_, x)
            calls += 1
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        out.append(f"share {cpu / wall:.3f} core, {rows * degree * width * calls / cpu / 1e9:.3f} G edge-columns per CPU s")
    print(f"host {os.environ.get('RANK', '?')} (quota {usable_cpus():g}): " + "; ".join(out), flush=True)


if __name__ == "__main__":
    main()
