"""Where a rank's peak memory is, and what is fixed per rank: the evidence behind benchmarks.md's
"Why 0.35x is out of reach with the input halo held".

    THP_MEM_ALLOC_ENABLE=1 mpiexec -n P python scripts/bench_peak.py PARTITION_DIR [--hidden 128]

Per rank (GCN, 2 layers, dropout 0.5, as bench_scale's worker):
1. the runtime, by what each step of starting a rank added to its resident memory: Python, `import torch`,
   gnn-dist's imports (scipy.sparse among them), the process group with MPI, `import numba`, then numba's
   kernels as the first epoch loads them (`kernels.numba_bytes`);
2. a second epoch followed operator by operator (a dispatch mode reading resident memory after each one):
   the operator where it peaked, and the storages of 1 MB or more alive there, each named by its owner
   (features, the held input halo, graph and operators) or else by the operator that returned it last.

`--memory-report` says how much each owner holds; this says at which operator the peak falls, and so which
temporaries stand in it. The dispatch mode leaves torch._dynamo unimported (as `StepMeter` does), which
would add about 130 MB to the traced epoch.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnn_dist.runtime.malloc import resident_bytes  # noqa: E402 (no torch yet: measured below)

MB = 2**20
MARKS = [("python", resident_bytes())]


def _mark(name: str) -> None:
    MARKS.append((name, resident_bytes()))


import torch  # noqa: E402

_mark("import torch")
import torch.distributed as dist  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

from gnn_dist.graph.load import load_partition  # noqa: E402
from gnn_dist.nn import build_model  # noqa: E402
from gnn_dist.runtime import kernels  # noqa: E402
from gnn_dist.runtime.launch import init  # noqa: E402
from gnn_dist.train import memory  # noqa: E402
from gnn_dist.train.node import Trainer  # noqa: E402
from partition.store import read_meta  # noqa: E402

_mark("gnn-dist imports")


class PeakTrace(TorchDispatchMode):
    """Resident memory after every operator; at its highest, the big storages alive and who made them."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, tuple] = {}  # storage address -> (weak ref, bytes, last operator returning it)
        self.peak, self.op, self.at_peak, self.count = 0, "", [], 0

    def _dispatch(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.count += 1
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.device.type == "cpu":
                st = t.untyped_storage()
                if st.nbytes() >= MB:
                    self.live[st.data_ptr()] = (StorageWeakRef(st), st.nbytes(), func.__name__)
        rss = resident_bytes()
        if rss > self.peak:
            self.live = {k: v for k, v in self.live.items() if not v[0].expired()}
            self.peak, self.op = rss, f"{self.count}:{func.__name__}"
            self.at_peak = [(k, n, name) for k, (_, n, name) in self.live.items()]
        return out


PeakTrace.__torch_dispatch__ = PeakTrace._dispatch  # (set after the class: no torch._dynamo import)


def _owners(graph) -> dict[int, str]:
    """Storage address -> owner, for what outlives a step."""
    features: set = set()
    memory._nbytes(graph.x, features)
    structure = set(features)
    memory._graph_parts(graph, structure)
    names = {k: "graph and operators" for k in structure - features}
    names.update({k: "features" for k in features})
    static = getattr(graph.exchange, "_static", None)
    if static is not None:
        names[static[1].untyped_storage().data_ptr()] = "input halo (held)"
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("partition")
    ap.add_argument("--hidden", type=int, default=128)
    a = ap.parse_args()
    ctx = init(backend="gloo", expected_world=read_meta(a.partition)["num_parts"])
    _mark("process group, MPI")
    if kernels.available():
        import numba  # noqa: F401 (its import apart from its kernels)
        _mark("import numba")
    graph = load_partition(a.partition, ctx, verify=False)
    torch.manual_seed(0)
    net = build_model("gcn", graph.num_features, a.hidden, graph.num_classes, layers=2, dropout=0.5)
    trainer = Trainer(net, graph, ctx, progress=False, eval_every=0)
    trainer.train_epoch(0)
    before = resident_bytes()
    trace = PeakTrace()
    with trace:
        trainer.train_epoch(1)
    owners = _owners(graph)
    alive: dict[str, float] = {}
    for key, n, op in trace.at_peak:
        name = owners.get(key, f"made in the step by {op}")
        alive[name] = alive.get(name, 0) + n / MB
    steps = [(name, round((b - a_) / MB, 1)) for (_, a_), (name, b) in zip([("", 0)] + MARKS, MARKS)]
    mine = {"rank": ctx.rank, "runtime": steps, "numba kernels": round(kernels.numba_bytes() / MB, 1),
            "resident before the traced epoch": round(before / MB), "peak": round(trace.peak / MB),
            "peak operator": trace.op, "alive at the peak (storages >= 1 MB)":
                {k: round(v, 1) for k, v in sorted(alive.items(), key=lambda kv: -kv[1])}}
    rows = [None] * ctx.world_size
    if ctx.world_size > 1:
        dist.all_gather_object(rows, mine)
    else:
        rows = [mine]
    if ctx.is_main:
        print("\n".join(json.dumps(r) for r in rows))
    ctx.close()


if __name__ == "__main__":
    main()
