"""How much a part's own order speeds its sparse product: the cost model prices reads by how often each row
is read (`top_reads`), as if the reads came in a random order; a real part's reads do not.

    python scripts/sparse_locality.py out/busiest/rmat-...-default-4x0.45-1gbit [--part 0] [--width 128]
                                      [--ladder] [--repeat 3] [--machine PROFILE]

Times the part's product (its inner and halo rows' columns and the self loops, each row's columns sorted as
training keeps them) on one thread, per CPU second, three ways: as built; its rows in a random order (each
row's reads kept); and its columns relabelled at random (each row's read counts and reuse times kept, their
places in memory scattered). With `--ladder`, also the part's rate predicted from its reuse curve
(partition.reuse): its reads split by how many other rows are read between two reads of one row (the
StatStack estimate), each band at the rate of uniformly random reads among that many rows, timed just
before (a ladder from the first-level cache to memory). `--repeat` measures it all again so many times,
taking turns, since this box's rates drift by tens of percent from one minute to the next. `--machine
PROFILE` prints the cost model's rate for the part beside them.
docs/benchmarks.md, "The cost model and the default partition on emulated hosts".
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if TYPE_CHECKING:
    import numpy as np

LADDER_BYTES = (32 << 10, 128 << 10, 512 << 10, 2 << 20, 8 << 20, 16 << 20, 32 << 20)  # this box: L1 32K, L2 512K, L3 32M
MEMORY_BYTES = 128 << 20  # the last rung: reads from memory


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="a partition folder")
    ap.add_argument("--part", type=int, default=0)
    ap.add_argument("--width", type=at_least(1, 4096), default=128, help="columns (1-4096)")
    ap.add_argument("--ladder", action="store_true", help="also the rate its reuse curve predicts")
    ap.add_argument("--repeat", type=at_least(0, 1000), default=1, help="measurements, taking turns (0: the header alone)")
    ap.add_argument("--machine", help="a machine profile: also the cost model's rate for the part at --width")
    a = ap.parse_args()
    import numpy as np
    import torch

    from gnn_dist.errors import GnnDistError
    from partition.reuse import cached_reads, read_order, reuse_curve
    from partition.store import read_part

    try:
        plan = read_part(a.folder, a.part)
        model = f"; the model with {a.machine}: {model_rate(a.folder, a.part, a.width, a.machine):.3f}" if a.machine else ""
    except GnnDistError as e:
        raise SystemExit(f"sparse_locality: {e}") from None
    torch.set_num_threads(1)
    n, cols = plan.num_inner, plan.num_inner + plan.num_halo
    rng = np.random.default_rng(0)
    row_of, col = read_order(plan.indptr, plan.indices)  # each row's reads and its self loop (every row has one)
    if not n:
        raise SystemExit(f"sparse_locality: {a.folder} part {a.part} has no rows: nothing to time")
    sizes = [max(1, b // (4 * a.width)) for b in LADDER_BYTES]
    head = (f"{a.folder.name} part {a.part}: {n} rows, {cols} columns, {col.size} reads, {a.width} wide, "
            f"G edge-columns per CPU second")
    if a.ladder:
        order = np.lexsort((col, row_of))
        curve = reuse_curve(col[order])
        hits = [cached_reads(curve, col.size, s) / col.size for s in sizes]
        head += f"; reads within a cache of {', '.join(map(str, sizes))} rows: {', '.join(f'{h:.2f}' for h in hits)}"
    print(head + model)
    shuffled, relabel = rng.permutation(n)[row_of], rng.permutation(cols)
    for _ in range(a.repeat):
        line = (f"as built {rate(row_of, col, (n, cols), a.width):.3f}, rows shuffled "
                f"{rate(shuffled, col, (n, cols), a.width):.3f}, columns relabelled "
                f"{rate(row_of, relabel[col], (n, cols), a.width):.3f}")
        print(line + (ladder_line(hits, sizes, a.width, rng) if a.ladder else ""), flush=True)


def at_least(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high`, else one line naming the range (a width of 0
    divided by zero, a negative one reached torch as a traceback)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = low - 1
        if not low <= v <= high:
            raise argparse.ArgumentTypeError(f"a whole number from {low} to {high}, got {text!r}")
        return v
    return parse


def rate(rows: np.ndarray, cols: np.ndarray, shape: tuple, width: int) -> float:
    """G edge-columns per CPU second of the product reading `cols` for `rows` (each row's columns sorted, as
    the operator is kept), `width` wide: the median of 5 after one warm-up."""
    import numpy as np
    import torch

    from gnn_dist.graph.local import spmm

    order = np.lexsort((cols, rows))
    crow = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=shape[0]))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note that sparse CSR is in beta
        m = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(cols[order]), torch.rand(cols.size), shape)
    x = torch.randn(shape[1], width)
    spmm(m, x)
    times = []
    for _ in range(5):
        cpu = time.thread_time()
        spmm(m, x)
        times.append(time.thread_time() - cpu)
    return cols.size * width / max(sorted(times)[2], 1e-9) / 1e9


def ladder_line(hits: list, sizes: list, width: int, rng: np.random.Generator) -> str:
    """The ladder timed now (uniformly random reads among each rung's rows, 10 a row, and among MEMORY_BYTES),
    and the part's rate it predicts: each band of the part's reads (`hits`: the share within each rung) at
    its rung's rate, the rest at memory's."""
    import numpy as np

    rows = np.repeat(np.arange(100_000), 10)
    rungs = [rate(rows, rng.integers(0, s, rows.size), (100_000, s), width)
             for s in sizes + [max(1, MEMORY_BYTES // (4 * width))]]
    bands = np.diff([0.0] + hits + [1.0])
    return f"; the ladder {', '.join(f'{r:.2f}' for r in rungs)}: predicted {1 / float(np.sum(bands / np.array(rungs))):.3f}"


def model_rate(folder: Path, part: int, width: int, machine: str) -> float:
    """G edge-columns per second the cost model prices the part's product at, `width` wide, on one core of
    `machine` (partition.step_work.sparse_seconds: its hot reads from `top_reads`, the rest from memory)."""
    from partition.machine import load
    from partition.part_counts import parts_from_meta
    from partition.step_work import Layer, sparse_seconds
    from partition.store import read_meta

    counts = parts_from_meta(read_meta(folder))[part]
    layer = Layer(width, width, width, backward_sparse=True, exchanges=2)
    return (counts["edges"] + counts["inner"]) * width / sparse_seconds(counts, layer, load(machine)) / 1e9


if __name__ == "__main__":
    main()
