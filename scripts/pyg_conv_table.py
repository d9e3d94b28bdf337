"""docs/layers.md's table of every conv in torch_geometric.nn.conv.__all__: how gd.nn.Distributed runs it, and its
largest difference from one process at P = 2 and 4 (outputs; parameter gradients), float64 reference.

    python scripts/pyg_conv_table.py            # prints the table (two mpiexec launches, about a minute)

The cases are tests/pyg_wrap_cases.py's, the runs tests/pyg_wrap_worker.py's: the same that
tests/test_pyg_wrap.py holds to 1e-5 (relative) at P = 1, 2 and 4, so a conv that regresses fails there.
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
from tests.test_pyg_wrap import GRAPH, _gather, _max_diff, _partition  # noqa: E402


def conv_cases(name: str) -> list[str]:
    """The cases that run the conv class `name` (its own name, or `name-variant`)."""
    return [c for c in cases() if c == name or c.startswith(f"{name}-")]


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
    import torch_geometric.nn.conv as pyg_conv

    from gnn_dist.nn.pyg_wrap import path_of

    with tempfile.TemporaryDirectory() as tmp:
        runs = {world: diffs(world, Path(tmp)) for world in (2, 4)}
    fmt = lambda v: "-" if np.isnan(v) else f"{v:.0e}"
    print("| conv | path | P=2 out / grad | P=4 out / grad |")
    print("|---|---|---|---|")
    for name in pyg_conv.__all__:
        path, mine = path_of(getattr(pyg_conv, name)), conv_cases(name)
        if name == "MessagePassing":  # the base class: a subclass of yours takes its path
            cells = ["(your subclass)"] * 2
        elif not mine:
            cells = ["not run"] * 2 if not path.startswith("refused") else ["-"] * 2
        else:
            cells = [" / ".join(fmt(max(runs[w][c][i] for c in mine)) for i in (0, 1)) for w in (2, 4)]
        print(f"| {name} | {path} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
