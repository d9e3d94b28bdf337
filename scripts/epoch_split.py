"""Where a rank's epoch goes, beside where the cost model says it goes.

    python scripts/epoch_split.py PARTITION --machine PROFILE [--hidden 128] [--layers 3] [--lab]

Trains the partition twice under torch.profiler (`mpiexec -n P`, one rank a part, one thread a rank, as the
model's figures are one core's), for 2 and for 6 epochs,
and takes the difference over 4: one steady epoch's self CPU seconds per operator, with the start, the first
epoch and the final evaluation cancelled out. Operators are summed in the model's three kinds: sparse
(`HaloSpMM` forward and backward; its time holds the wait for the halo rows, small where the ranks are
even), dense (the matrix products) and elementwise (dropout, ReLU, bias, sums); the rest is autograd's,
the optimiser's and the exchange's own work. Work outside any torch operator (numba kernels called from
Python, such as the halo rows' keyed dropout) is in no column: the logged compute (`rank_compute_s`, under
the profiler) holds it. The model's figures are `partition.costmodel.predict`'s per
rank, at one core, with the profile given (take it on this host: `gnn-dist profile-machine`).
With `--lab` the ranks run one a host of the network lab now up (`scripts/netlab.py up ...`, as root), and the
model's figures are at the host's cores (a host of 0.22 core runs a one-core second in 4.5 s of wall time, which
is what the profiler counts there); give the profile measured in that lab. There the profiler's own work
counts against the host's quota: R-MAT's 2-part ranks at 0.22 core logged 1.3-1.7x the compute of the same
run without it, so read the columns as shares, not seconds (docs/benchmarks.md).
docs/benchmarks.md, "Where a rank's epoch goes".
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EPOCHS = (2, 6)
TIMEOUT_S = 1800  # one training run
DENSE = ("aten::mm", "aten::addmm", "aten::bmm")
ELEMENTWISE = ("aten::add", "aten::add_", "aten::clamp_min", "aten::relu", "aten::threshold_backward",
               "aten::mul", "aten::mul_", "aten::sum")


def kind(op: str) -> str:
    """The cost model's kind of a profiler operator: sparse, dense, elementwise or other."""
    if "SpMM" in op:
        return "sparse"
    if op in DENSE:
        return "dense"
    if "Dropout" in op or op in ELEMENTWISE:
        return "elementwise"
    return "other"


def worker(out: str, argv: list[str]) -> None:
    """One rank: `gnn-dist` under torch.profiler, its operators' self CPU seconds written to OUT.RANK.json."""
    from torch.profiler import ProfilerActivity, profile

    from gnn_dist.cli.main import main

    with profile(activities=[ProfilerActivity.CPU]) as p:
        code = main(argv)
    rank = next((os.environ[k] for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "RANK") if k in os.environ), "0")
    Path(f"{out}.{rank}.json").write_text(json.dumps({e.key: e.self_cpu_time_total / 1e6 for e in p.key_averages()}))
    raise SystemExit(code)


def failure(stderr: str) -> str:
    """The line that says why a run failed: gnn-dist's own, not the profiler's notes printed after it."""
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip() and not ln.startswith("USDT:")]
    ours = [ln for ln in lines if ln.startswith("gnn-dist") or ln.startswith("[gnn-dist]")]
    return (ours or lines or ["no message"])[-1]


def netlab_module():
    """scripts/netlab.py, imported only for `--lab` (a rank's worker never needs it)."""
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    import netlab

    return netlab


def lab_state(ranks: int, cores: float) -> None:
    """Refuse, in one line, a lab that is not up, not of `ranks` hosts, or of hosts of other cores than the
    profile's (the model's figures would be at the wrong speed)."""
    netlab = netlab_module()
    if not netlab.STATE.exists():
        raise SystemExit("epoch_split: --lab needs the network lab up (scripts/netlab.py up ..., as root)")
    state = netlab.load_state()
    if state.get("hosts") != ranks:
        raise SystemExit(f"epoch_split: --lab needs a lab of {ranks} hosts up, one a part; it has {state.get('hosts')}")
    if state.get("cores") is not None and abs(float(state["cores"]) - cores) > 1e-9:
        raise SystemExit(f"epoch_split: the profile is of hosts of {cores:g} core, the lab's have {state['cores']:g}")


def launch(cmd: list[str], ranks: int, lab: bool, epochs: int) -> None:
    """`cmd` as `ranks` ranks: under mpiexec on this box, or one a host of the network lab now up."""
    if lab:
        codes = netlab_module().launch(cmd, timeout=TIMEOUT_S)[0]
        if 124 in codes:
            raise SystemExit(f"epoch_split: training {epochs} epochs on the lab took over {TIMEOUT_S} s; stopped")
        if any(codes):
            raise SystemExit(f"epoch_split: training {epochs} epochs on the lab failed: exit codes {codes}")
        return
    mpiexec = Path(sys.executable).with_name("mpiexec")
    try:
        done = subprocess.run([str(mpiexec), "-n", str(ranks), *cmd], capture_output=True, text=True,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"epoch_split: training {epochs} epochs took over {TIMEOUT_S} s; stopped") from None
    if done.returncode:
        raise SystemExit(f"epoch_split: training failed: {failure(done.stderr)}")


def per_epoch(folder: Path, ranks: int, hidden: int, layers: int,
              lab: bool = False) -> tuple[list[dict[str, float]], list[float]]:
    """Each rank's steady epoch in seconds per kind (the 6-epoch run less the 2-epoch run, over 4), and its
    logged compute (`rank_compute_s`, the median of the longer run's epochs after the first)."""
    runs, logged = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for epochs in EPOCHS:
            out = f"{tmp}/e{epochs}"
            launch([sys.executable, __file__, "--worker", out, "train", "--partition", str(folder), "--hidden",
                    str(hidden), "--layers", str(layers), "--epochs", str(epochs), "--eval-every",
                    str(max(EPOCHS) + 1), "--progress", "none", "--quiet", "--log", f"{out}.jsonl", "--threads", "1"],
                   ranks, lab, epochs)
            runs.append([json.loads(Path(f"{out}.{r}.json").read_text()) for r in range(ranks)])
        records = [json.loads(line) for line in Path(f"{out}.jsonl").read_text().splitlines()]
        epochs = [r["rank_compute_s"] for r in records if "rank_compute_s" in r][1:] or [[float("nan")] * ranks]
        logged = [statistics.median(e[r] for e in epochs) for r in range(ranks)]
    span = EPOCHS[1] - EPOCHS[0]
    split = []
    for short, long in zip(*runs):
        kinds = dict.fromkeys(("sparse", "dense", "elementwise", "other"), 0.0)
        for op, seconds in long.items():
            kinds[kind(op)] += (seconds - short.get(op, 0.0)) / span
        split.append(kinds)
    return split, logged


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        return worker(sys.argv[2], sys.argv[3:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("partition", type=Path)
    ap.add_argument("--machine", type=Path, required=True, help="the profile the model prices with")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--lab", action="store_true", help="run one rank a host of the network lab now up (root)")
    a = ap.parse_args()
    if a.hidden < 1 or a.layers < 1:
        raise SystemExit(f"epoch_split: --hidden and --layers must be at least 1, got {a.hidden} and {a.layers}")
    sys.path.insert(0, str(ROOT))
    from partition.costmodel import Workload, predict
    from partition.errors import GnnDistError
    from partition.machine import load
    from partition.part_counts import parts_from_meta
    from partition.store import read_meta

    try:
        meta, machine = read_meta(str(a.partition)), load(str(a.machine))
        work = Workload(meta["num_features"], meta["num_classes"], a.hidden, a.layers)
        model = predict(parts_from_meta(meta), work, machine).ranks
    except GnnDistError as e:
        raise SystemExit(f"epoch_split: {e}") from None
    except KeyError as e:
        raise SystemExit(f"epoch_split: {a.partition}/partition.json has no {e}: not a static partition") from None
    if a.lab:
        lab_state(meta["num_parts"], machine.cores_per_host)
    measured, logged = per_epoch(a.partition, meta["num_parts"], a.hidden, a.layers, a.lab)
    speed = min(1.0, machine.cores_per_host) if a.lab else 1.0  # the one-core figures at the lab host's cores
    model = [dataclasses.replace(r, sparse_s=r.sparse_s / speed, dense_s=r.dense_s / speed,
                                 elementwise_s=r.elementwise_s / speed) for r in model]
    where = f"hosts of {machine.cores_per_host:g} core each" if a.lab else "one core"
    print(f"{a.partition.name}, GCN {a.layers} layers, hidden {a.hidden}: one epoch's seconds, measured (self CPU, "
          f"torch.profiler) / modelled ({where}, {machine.name})")
    print("| rank | sparse | dense | elementwise | other (measured) | sum | logged compute |")
    print("|---|---|---|---|---|---|---|")
    for r, (m, p, c) in enumerate(zip(measured, model, logged)):
        print(f"| {r} | {m['sparse']:.3f} / {p.sparse_s:.3f} | {m['dense']:.3f} / {p.dense_s:.3f} | "
              f"{m['elementwise']:.3f} / {p.elementwise_s:.3f} | {m['other']:.3f} | {sum(m.values()):.3f} / "
              f"{p.sparse_s + p.dense_s + p.elementwise_s:.3f} | {c:.3f} |")


if __name__ == "__main__":
    main()
