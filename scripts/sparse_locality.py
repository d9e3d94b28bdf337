"""How much a part's own order speeds its sparse product: the cost model prices reads by how often each row
is read (`top_reads`), as if the reads came in a random order; a real part's reads do not.

    python scripts/sparse_locality.py out/busiest/rmat-...-default-4x0.45-1gbit [--part 0] [--width 128]

Times the part's product (its inner and halo rows' columns, and the self loops) on one thread, per CPU
second, three ways: as built; its rows in a random order (each row's reads kept); and its columns relabelled
at random (each row's read counts kept, their places in memory scattered). docs/benchmarks.md, "The cost
model and the default partition on emulated hosts".
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="a partition folder")
    ap.add_argument("--part", type=int, default=0)
    ap.add_argument("--width", type=int, default=128)
    a = ap.parse_args()
    import numpy as np
    import torch

    from gnn_dist.errors import GnnDistError
    from gnn_dist.graph.local import spmm
    from partition.store import read_part

    try:
        plan = read_part(a.folder, a.part)
    except GnnDistError as e:
        raise SystemExit(f"sparse_locality: {e}") from None
    torch.set_num_threads(1)
    n, ip, ix = plan.num_inner, np.asarray(plan.indptr), np.asarray(plan.indices)
    cols = plan.num_inner + plan.num_halo
    rng = np.random.default_rng(0)
    rows = [np.append(ix[ip[i]:ip[i + 1]], i) for i in range(n)]  # each row's reads and its self loop

    def rate(rows_: list) -> float:
        crow = np.concatenate([[0], np.cumsum([len(r) for r in rows_])])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's note that sparse CSR is in beta
            m = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(np.concatenate(rows_)),
                                        torch.rand(int(crow[-1])), (n, cols))
        x = torch.randn(cols, a.width)
        spmm(m, x)
        times = []
        for _ in range(5):
            cpu = time.thread_time()
            spmm(m, x)
            times.append(time.thread_time() - cpu)
        return int(crow[-1]) * a.width / sorted(times)[2] / 1e9

    relabel = rng.permutation(cols)
    print(f"{a.folder.name} part {a.part}: {n} rows, {cols} columns, {sum(len(r) for r in rows)} reads, "
          f"{a.width} wide, G edge-columns per CPU second: as built {rate(rows):.3f}, rows shuffled "
          f"{rate([rows[i] for i in rng.permutation(n)]):.3f}, columns relabelled "
          f"{rate([np.sort(relabel[r]) for r in rows]):.3f}")


if __name__ == "__main__":
    main()
