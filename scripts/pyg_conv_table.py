"""docs/layers.md's table of every conv in torch_geometric.nn.conv.__all__: how gd.nn.Distributed runs it, and its
largest difference from one process at P = 2 and 4 (outputs; parameter gradients), float64 reference.

    python scripts/pyg_conv_table.py            # prints the table (two mpiexec launches, about a minute)

The cases are tests/pyg_wrap_cases.py's, the runs tests/pyg_wrap_worker.py's: the same that
tests/test_pyg_wrap.py holds to 1e-5 (relative) at P = 1, 2 and 4, so a conv that regresses fails there; it also
makes this table again from its own runs and checks the one in docs/layers.md against it.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import run_worker  # noqa: E402
from tests.pyg_wrap_cases import cases, one_way_graph, reference  # noqa: E402
from tests.test_pyg_wrap import GRAPH, _gather, _max_diff, _partition, conv_table  # noqa: E402


def diffs(world: int, work: Path) -> dict[str, tuple[float, float]]:
    """case -> (max |out - ref|, max |grad - ref| over parameters) at P = world."""
    out = work / f"res{world}"
    out.mkdir()
    one_way, parts = one_way_graph(world)
    run_worker(world, "pyg_wrap_worker.py", out, _partition(world, work / f"part{world}"),
               _partition(world, work / f"one-way{world}", one_way, parts), timeout=600)
    res = {}
    for name in cases():
        got, ref = _gather(out, name, world), reference(name, GRAPH)
        grads = [k for k in ref if k.startswith("grad_") and k != "grad_x"]
        res[name] = (_max_diff(got["out"], ref["out"]), max((_max_diff(got[k], ref[k]) for k in grads), default=np.nan))
    return res


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runs = {world: diffs(world, Path(tmp)) for world in (2, 4)}
    print("\n".join(conv_table(runs)))


if __name__ == "__main__":
    main()
