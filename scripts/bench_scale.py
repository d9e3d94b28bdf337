"""Big graphs: PyG against gnn-dist at P = 1, 2 and 4, with memory, partitioning cost and a roofline, from one run.

    python scripts/bench_scale.py [--dataset SPEC] [--epochs 3] [--hidden 128] [--ranks 1,2,4] [--device cpu|cuda]
                                  [--stage all|goal|rest] [--workdir DIR]

Default graph: sbm:nodes=1000000,avg_degree=16,homophily=0.9,features=128,classes=16 (16M edges), GCN with
2 layers. Prints three tables, each row (and flushed) as soon as it is measured:

1. Rows: PyG with a GCN-normalised `torch.sparse` CSR `adj_t` (its fastest CPU path), gnn-dist P=1 and
   the goal line (gnn-dist P=1's epoch at most 0.7x PyG adj_t's), then PyG with `edge_index` (skipped,
   with a note, where its per-edge messages would not fit in the memory available: host RAM on the CPU,
   the GPU's free memory on CUDA) and gnn-dist at the other P (`scripts/bench_train.py` runs them).
   Columns: epoch seconds, peak RSS per rank, and for gnn-dist `gnn-dist partition`'s time, peak RSS and
   the peak it estimated beforehand.
2. Machine peaks measured here: memory bandwidth (a large copy) and dense flops (a large matmul).
3. gnn-dist's P=1 epoch by kind of work beside a roofline for each kind (the bytes it must move over the
   measured bandwidth, or its flops over the measured peak), and the timed epoch (no profiler) beside. On
   the CPU: torch profiler, own CPU time per operator. On CUDA: device time, each operator's own kernels
   as the GPU recorded them (not stretched by the profiler's host overhead), with the device's busy sum
   and the timed epoch's idle rest. (scripts/scale_roofline.py: the peaks, the roofline, the profile.)

`--stage goal` runs only PyG adj_t, gnn-dist P=1 and the goal line; `--stage rest` the others (edge_index,
P > 1, peaks, breakdown); `all` both. The graph is generated once and saved as an .npz in --workdir (a
temporary folder by default) that the partition and PyG children load (`file:`); the partitions and
PyG adj_t's result stay there too, so a `rest` run with the `goal` run's --workdir (the GPU check does
this) makes neither again. Exit status 1 if a row failed (the other rows still run).

Every process runs with torch's default threads (all cores for one process; the launcher gives each of
P ranks cores / P), and with torch's huge pages where `gnn-dist train` would turn them on for the
partition (THP_MEM_ALLOC_ENABLE; PyG's rows as P=1, since any torch user can set it).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_train import _result, huge_pages, peak_rss_mb, pyg_child, worker  # noqa: E402
from scale_roofline import machine_peaks, print_breakdown, print_peaks, profile_child  # noqa: E402

DEFAULT = "sbm:nodes=1000000,avg_degree=16,homophily=0.9,features=128,classes=16"
GOAL = 0.7  # issue 39: gnn-dist P=1's epoch at most this times PyG adj_t's


# ------------------------------------------------------------------------- graph
def prepare_graph(spec: str, work: Path) -> tuple[str, dict]:
    """The graph as a `file:` spec in `work`, and its sizes: generated here once and saved, so that the
    partition and PyG children (each its own process, for a clean peak RSS) load it instead of each
    generating it again (about 15 s each at 1M nodes). Reused when `work` already holds `spec`."""
    info_file, npz = work / "graph.json", work / "graph.npz"
    if info_file.exists() and json.loads(info_file.read_text())["spec"] == spec:
        return f"file:{npz}", json.loads(info_file.read_text())
    import numpy as np

    from gnn_dist.data import load_dataset

    g = load_dataset(spec)
    arrays = {"edge_index": np.stack(g.edge_index()), "x": g.x, "y": g.y, "train_mask": g.train_mask,
              "val_mask": g.val_mask, "test_mask": g.test_mask, "num_classes": g.num_classes, "num_nodes": g.num_nodes}
    arrays.update({k: getattr(g, k) for k in ("edge_weight", "edge_attr") if getattr(g, k) is not None})
    tmp = work / "graph.tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, npz)  # a killed run leaves no half-written graph behind for the next one to load
    info = {"spec": spec, "nodes": g.num_nodes, "edges": g.num_edges, "features": g.num_features}
    info_file.write_text(json.dumps(info))
    return f"file:{npz}", info


def edge_index_fits(info: dict, hidden: int, device: str) -> tuple[bool, str]:
    """PyG's edge_index path holds a few edges x hidden float tensors (messages, their gradients): about 3 of
    them at once measured on the 1M-node graph (20.7 GB peak for 16M edges at width 128). On CUDA they live
    in the GPU's memory, so its free memory decides, not the host's."""
    need = 3 * info["edges"] * hidden * 4 + info["nodes"] * info["features"] * 4
    if device == "cuda":
        import torch

        avail, where = torch.cuda.mem_get_info()[0], "free on the GPU"
    else:
        import psutil

        avail, where = psutil.virtual_memory().available, "available"
    return need < 0.8 * avail, f"needs about {need / 2**30:.1f} GiB, {avail / 2**30:.1f} GiB {where}"


# -------------------------------------------------------------------- partition
def partition_child(spec: str, parts: int, out: str) -> None:
    """`gnn-dist partition` in this process, then its wall time and peak RSS (the estimate is on stderr)."""
    from gnn_dist.cli import main as cli

    t = time.perf_counter()
    if cli(["partition", "--dataset", spec, "--parts", str(parts), "--out", out]) != 0:
        raise SystemExit("partitioning failed")
    print("RESULT " + json.dumps({"seconds": time.perf_counter() - t, "rss_mb": peak_rss_mb()}))


def run_partition(me: list[str], spec: str, parts: int, out: Path) -> dict:
    r = subprocess.run(me + ["--partition-child", str(parts), "--out", str(out), "--dataset", spec],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    result = next((json.loads(x[7:]) for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    if result is None:
        raise SystemExit(f"partitioning failed:\n{r.stderr[-3000:]}")
    est = re.search(r"estimated peak memory ([\d.]+) GiB", r.stderr)
    result["estimate_mb"] = float(est.group(1)) * 1024 if est else float("nan")
    return result


# ------------------------------------------------------------------------ rows
class Bench:
    """One run's rows, printed as each finishes, over one working folder (graph, partitions, results)."""

    def __init__(self, a: argparse.Namespace, work: Path):
        self.a, self.work = a, work
        self.me = [sys.executable, str(Path(__file__).resolve())]
        self.common = ["--epochs", str(a.epochs), "--hidden", str(a.hidden), "--model", a.model, "--device", a.device]
        self.mpiexec = str(Path(sys.executable).with_name("mpiexec"))
        self.spec, self.info = prepare_graph(a.dataset, work)
        self.results = work / "results.json"  # PyG adj_t's row, for a later `rest` run's ratio column
        self.base: float | None = None
        self.failed: list[str] = []

    def header(self) -> None:
        a = self.a
        print(f"\n{a.dataset}, {a.model}, 2 layers, hidden {a.hidden}, {a.epochs} timed epochs, {os.cpu_count()} cores, "
              f"{a.device}")
        print(f"{'configuration':<16} {'epoch s':>8} {'vs PyG adj_t':>12} {'peak RSS/rank MB':>22} "
              f"{'partition s':>11} {'partition peak MB':>17} {'estimate MB':>11}", flush=True)

    def partition(self, p: int) -> tuple[Path, dict]:
        """P parts in the working folder, made once (a folder without its result is made again)."""
        d, res = self.work / f"p{p}", self.work / f"p{p}.json"
        if not res.exists():
            shutil.rmtree(d, ignore_errors=True)
            res.write_text(json.dumps(run_partition(self.me, self.spec, p, d)))
        return d, json.loads(res.read_text())

    def row(self, name: str, cmd: list[str], env: dict, part: dict | None = None) -> dict | None:
        """Run one configuration and print its row; a failure is a note (and the exit status), not the end."""
        try:
            r = _result(cmd, env)
        except SystemExit as e:
            self.failed.append(name)
            print(f"note: {name} failed: {str(e).strip().splitlines()[-1]}", flush=True)
            print(str(e), file=sys.stderr, flush=True)
            return None
        rss = "/".join(f"{m:.0f}" for m in r["rss_mb"])
        base = self.base or (r["epoch_s"] if name == "PyG adj_t" else None)
        ratio = f"{r['epoch_s'] / base:>12.2f}" if base else f"{'-':>12}"
        cells = (f"{part['seconds']:>11.1f} {part['rss_mb']:>17.0f} {part['estimate_mb']:>11.0f}" if part else
                 f"{'-':>11} {'-':>17} {'-':>11}")
        print(f"{name:<16} {r['epoch_s']:>8.3f} {ratio} {rss:>22} {cells}", flush=True)
        if self.a.device == "cuda" and "placement" in r:
            print(f"note: {name}: {r['placement']}", flush=True)
        return r

    def pyg(self, kind: str) -> dict | None:
        return self.row(f"PyG {kind}", self.me + ["--pyg", kind, "--dataset", self.spec] + self.common,
                        huge_pages(self.partition(1)[0], self.a.hidden))

    def gnn_dist(self, p: int) -> dict | None:
        d, part = self.partition(p)
        return self.row(f"gnn-dist P={p}", [self.mpiexec, "-n", str(p)] + self.me + ["--worker", str(d)] + self.common,
                        huge_pages(d, self.a.hidden), part)

    def adj_t(self) -> None:
        """PyG adj_t's row, the base of every ratio: measured, or a `goal` run's in the same folder."""
        if self.results.exists():
            self.base = json.loads(self.results.read_text())["epoch_s"]
            print(f"{'PyG adj_t':<16} {self.base:>8.3f} {1:>12.2f}   (measured by the goal stage, same --workdir)",
                  flush=True)
            return
        r = self.pyg("adj_t")
        if r is not None:
            self.base = r["epoch_s"]
            self.results.write_text(json.dumps({"epoch_s": self.base}))

    def goal(self) -> None:
        """PyG adj_t, gnn-dist P=1 and the line that compares them (issue 39's goal)."""
        self.adj_t()
        p1 = self.gnn_dist(1)
        if self.base and p1:
            ratio = p1["epoch_s"] / self.base
            print(f"goal: gnn-dist P=1 epoch <= {GOAL}x PyG adj_t's ({self.a.device}): measured {ratio:.2f}x "
                  f"({p1['epoch_s']:.4f} s against {self.base:.4f} s), {'met' if ratio <= GOAL else 'missed'}",
                  flush=True)

    def rest(self, ranks: list[int]) -> None:
        """PyG edge_index where it fits, gnn-dist at the other P, the machine's peaks, the P=1 breakdown."""
        a = self.a
        if self.base is None:
            self.adj_t()
        fits, why = (False, "left out (--skip-edge-index)") if a.skip_edge_index else \
            edge_index_fits(self.info, a.hidden, a.device)
        if fits:
            self.pyg("edge_index")
        else:
            print(f"note: PyG edge_index skipped: {why}", flush=True)
        for p in ranks:
            if p != 1:
                self.gnn_dist(p)
        d = self.partition(1)[0]
        try:
            prof = _result(self.me + ["--profile", str(d)] + self.common, huge_pages(d, a.hidden))
        except SystemExit as e:
            self.failed.append("profile")
            print(f"note: the P=1 profile failed\n{e}", file=sys.stderr, flush=True)
            prof = None
        peaks = machine_peaks(a.device, a.peak_copy_mb, a.peak_matmul)
        print_peaks(peaks)
        if prof is not None and a.model == "gcn":
            print_breakdown(prof, peaks)


# ------------------------------------------------------------------------ main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default=DEFAULT)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--ranks", default="1,2,4", help="gnn-dist's P (P=1 always runs: the goal compares it)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: PyG adj_t and gnn-dist on the GPU (ranks share it where they outnumber GPUs), "
                         "roofline against its peaks")
    ap.add_argument("--stage", default="all", choices=["all", "goal", "rest"])
    ap.add_argument("--workdir", default=None, help="keep the graph, partitions and PyG adj_t's result here")
    ap.add_argument("--skip-edge-index", action="store_true", help="leave out PyG's edge_index row")
    ap.add_argument("--peak-copy-mb", type=int, default=512, help="size of the bandwidth peak's copy")
    ap.add_argument("--peak-matmul", type=int, default=4096, help="side of the flops peak's matmul")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--profile", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--pyg", default=None, choices=["adj_t", "edge_index"], help=argparse.SUPPRESS)
    ap.add_argument("--partition-child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.epochs, a.hidden, a.model, a.device)
    if a.profile:
        return profile_child(a.profile, a.epochs, a.hidden, a.model, a.device)
    if a.pyg:
        return pyg_child(a.dataset, a.epochs, a.hidden, a.model, a.pyg, a.device)
    if a.partition_child:
        return partition_child(a.dataset, a.partition_child, a.out)

    ranks = [int(x) for x in a.ranks.split(",")]
    with contextlib.ExitStack() as stack:
        if a.workdir:
            Path(a.workdir).mkdir(parents=True, exist_ok=True)
        work = Path(a.workdir or stack.enter_context(tempfile.TemporaryDirectory()))
        bench = Bench(a, work)
        bench.header()
        if a.stage in ("all", "goal"):
            bench.goal()
        if a.stage in ("all", "rest"):
            bench.rest(ranks)
    if bench.failed:
        sys.exit(f"failed rows: {', '.join(bench.failed)}")


if __name__ == "__main__":
    main()
