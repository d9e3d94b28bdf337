"""Dynamic GNNs: accuracy against the single-process PyG run, and the cost of snapshot plans.

Part 1 (`--part accuracy`): Chickenpox and England Covid, EvolveGCN-O and
GCRN. The single-process PyG reference (same model, windows and seed) and
gnn-dist on P ranks (`mpiexec`) are trained side by side; the table gives the
test MSE of each, their ratio and the "last value" baseline.

Part 2 (`--part speed`): a drifting SBM. Epoch time of gnn-dist with
incremental plans (stored differences applied), with plans rebuilt every
snapshot (halo derived from the edges and agreed with the peers), both
re-deriving every epoch (no plan cache), against P=1, and with plans cached
after the first epoch — all in one run; then each run's time to accuracy
(gnn_dist.train.tta: evaluated every --eval-every epochs, timed apart; no
validation split, so the test score picks the epoch; target: P=1's final test
accuracy minus 0.3 points, or --target).

Part 3 (`--part sequence`): a long sequence of small graphs (740 snapshots of
700 nodes, like PyG-Temporal's bus-traffic data), where every all-to-all's
latency counts: PyG in one process against gnn-dist at P=1 and P=2, with one
exchange per snapshot and convolution (`--snapshot-group 1`) and with
automatic snapshot groups, at P=2 over gloo and over MPI (`--transport`); training plus evaluation per epoch (the best epoch:
timing on a shared 2-core box varies by tens of percent between spells), and
the all-to-alls each makes.

    python scripts/bench_dynamic.py --part accuracy
    python scripts/bench_dynamic.py --part speed
    python scripts/bench_dynamic.py --part sequence
    python scripts/bench_dynamic.py --part accuracy --device cuda    # any part, on the GPU
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnn_dist.data import load_dataset  # noqa: E402
from gnn_dist.nn.dynamic import build_dynamic_model, to_pyg_dynamic  # noqa: E402
from gnn_dist.train import tta  # noqa: E402
from gnn_dist.train.dynamic_reference import ReferenceRun  # noqa: E402
from partition.dynamic_parts import write_snapshot_partition  # noqa: E402

MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))


def launch(part: Path, ranks: int, log: Path, *args: str, device: str = "cpu") -> list[dict]:
    """`gnn-dist train` on P ranks: on the CPU (gloo), or on the GPUs (ranks sharing one stage through host memory)."""
    cmd = [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "gnn_dist", "train", "--partition", str(part),
           "--quiet", "--log", str(log), *(["--backend", "gloo"] if device == "cpu" else []), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return [json.loads(line) for line in log.read_text().splitlines()]


def accuracy(a: argparse.Namespace, tmp: Path) -> None:
    print(f"| data | model | PyG 1 process test MSE | gnn-dist P={a.ranks} test MSE | ratio | last value MSE |")
    print("|---|---|---|---|---|---|")
    for name in ("chickenpox", "england_covid"):
        seq = load_dataset(name)
        part = tmp / f"{name}-{a.ranks}"
        write_snapshot_partition(part, seq, a.ranks)
        for kind in ("evolvegcn", "gcrn"):
            ref_mse, dist_mse, last = [], [], []
            for seed in range(a.seeds):
                torch.manual_seed(seed)
                model = build_dynamic_model(kind, seq.num_features, a.hidden, 1)
                ref = ReferenceRun(to_pyg_dynamic(model), seq, a.window, lr=a.lr, device=a.device)
                for _ in range(a.epochs):
                    ref.train_epoch()
                r = ref.evaluate()
                ref_mse.append(r["test_mse"])
                last.append(r["test_last_value_mse"])
                log = tmp / f"{name}-{kind}-{seed}.jsonl"
                rec = launch(part, a.ranks, log, "--model", kind, "--hidden", str(a.hidden), "--epochs",
                             str(a.epochs), "--window", str(a.window), "--lr", str(a.lr), "--seed", str(seed),
                             "--eval-every", "0", device=a.device)[-1]
                dist_mse.append(rec["test_mse"])
            rm, dm = float(np.mean(ref_mse)), float(np.mean(dist_mse))
            print(f"| {name} | {kind} | {rm:.4f} | {dm:.4f} | {dm / rm:.3f} | {np.mean(last):.4f} |", flush=True)


def speed(a: argparse.Namespace, tmp: Path) -> None:
    seq = load_dataset(a.dsbm)
    runs = [(1, "incremental", True, []), (a.ranks, "incremental", True, []), (a.ranks, "rebuild", True, []),
            (a.ranks, "incremental", True, ["--no-overlap"]), (a.ranks, "incremental", False, [])]
    parts = {}
    print(f"{seq.name}: {seq.num_snapshots} snapshots of {seq.num_nodes} nodes, "
          f"{sum(s.src.shape[0] for s in seq.snapshots) / seq.num_snapshots:.0f} edges per snapshot", flush=True)
    for ranks in sorted({r for r, _, _, _ in runs}):
        t0 = time.perf_counter()
        meta = write_snapshot_partition(tmp / f"dsbm-{ranks}", seq, ranks)
        parts[ranks] = tmp / f"dsbm-{ranks}"
        c = meta["churn_summary"]
        print(f"P={ranks}: partition {time.perf_counter() - t0:.1f}s, halo {c['halo_rows_mean']:.0f} rows per snapshot, "
              f"per step +{c['halo_added_per_step']:.0f} / -{c['halo_removed_per_step']:.0f} halo rows, "
              f"+{c['edges_added_per_step']:.0f} / -{c['edges_removed_per_step']:.0f} edges", flush=True)
    rows, curves = [], {}
    for ranks, mode, fresh, extra in runs:  # fresh: re-derive every snapshot's plan every epoch (no cache)
        recs = launch(parts[ranks], ranks, tmp / f"speed-{ranks}-{mode}-{fresh}-{len(extra)}.jsonl", "--model",
                      a.model, "--hidden", str(a.hidden), "--epochs", str(a.epochs), "--window", str(a.window),
                      "--plans", mode, "--eval-every", str(a.eval_every), *(["--no-plan-cache"] if fresh else []),
                      *extra, device=a.device)
        steady = recs[1:] or recs  # the first epoch pays start-up costs
        label = mode + (" no-overlap" if extra else "") + ("" if fresh else ", plans cached")
        curves[f"P={ranks} {label}"] = recs
        rows.append((ranks, label, float(np.median([r["epoch_time"] for r in steady])),
                     float(np.median([r["plan_time"] for r in steady])), recs[-1].get("test_acc", float("nan"))))
    base = rows[1][2]
    p1 = rows[0][2]
    print("\n| ranks | plans | epoch s | plan s per epoch | x incremental | x P=1 | test acc |")
    print("|---|---|---|---|---|---|---|")
    for ranks, mode, ep, plan, acc in rows:
        print(f"| {ranks} | {mode} | {ep:.3f} | {plan:.3f} | {ep / base:.2f} | {ep / p1:.2f} | {acc:.3f} |")
    target = a.target if a.target is not None else tta.default_target(next(iter(curves.values())))
    print(f"\n{tta.table(curves, target)}")


def sequence(a: argparse.Namespace, tmp: Path) -> None:
    """Long sequences of small graphs: PyG in one process against gnn-dist at P=1 and P, per-snapshot groups
    (G=1, one exchange per snapshot and convolution) against automatic groups, training plus evaluation."""
    seq = load_dataset(a.small)
    print(f"{seq.name}: {seq.num_snapshots} snapshots of {seq.num_nodes} nodes, "
          f"{sum(s.src.shape[0] for s in seq.snapshots) / seq.num_snapshots:.0f} edges per snapshot; "
          f"hidden {a.hidden}, window {a.window}; best epoch of 2..{a.epochs} (PyG: of two such spells, "
          f"before and after the gnn-dist runs)", flush=True)
    for ranks in sorted({1, a.ranks}):
        write_snapshot_partition(tmp / f"seq-{ranks}", seq, ranks)
    print("\n| model | run | train s | eval s | epoch s | x PyG | all-to-alls per training step | "
          "eval all-to-alls per snapshot | us per snapshot pass |")
    print("|---|---|---|---|---|---|---|---|---|")
    passes = seq.num_train + seq.num_snapshots  # snapshot passes per epoch: training, then evaluation
    for kind in a.models.split(","):
        torch.manual_seed(0)
        ref = ReferenceRun(to_pyg_dynamic(build_dynamic_model(kind, seq.num_features, a.hidden, seq.num_classes)),
                           seq, a.window, lr=a.lr, device=a.device)
        ref_times = reference_epochs(ref, a.epochs)[1:]  # again after the gnn-dist runs: the best of both spells
        rows = []
        # P=1; then P ranks as before (one exchange per snapshot, gloo), with groups, with groups over MPI (the
        # default under mpiexec for plans this small)
        for ranks, group, transport in ((1, 1, "auto"), (1, 0, "auto"), (a.ranks, 1, "gloo"), (a.ranks, 0, "gloo"),
                                        (a.ranks, 0, "auto")):
            recs = launch(tmp / f"seq-{ranks}", ranks, tmp / f"seq-{kind}-{ranks}-{group}-{transport}.jsonl", "--model",
                          kind, "--hidden", str(a.hidden), "--epochs", str(a.epochs), "--window", str(a.window),
                          "--lr", str(a.lr), "--snapshot-group", str(group), "--transport", transport,
                          device=a.device)[1:]
            best = min(recs, key=lambda r: r["epoch_time"] + r["eval_time"])
            label = f"gnn-dist P={ranks}, " + ("G=1" if group == 1 else "groups auto") + \
                (f", {'mpi (auto)' if transport == 'auto' else transport}" if ranks > 1 else "")
            rows.append((label, best["epoch_time"], best["eval_time"], recs[-1]["exchanges_per_step"],
                         recs[-1]["eval_exchanges"] / seq.num_snapshots))
        ref_times += reference_epochs(ref, a.epochs)[1:]
        tr, ev = min(ref_times, key=sum)
        base = tr + ev
        print(f"| {kind} | PyG, 1 process | {tr:.2f} | {ev:.2f} | {base:.2f} | 1.00 | | | {base / passes * 1e6:.0f} |")
        for label, tr, ev, per_step, per_eval in rows:
            print(f"| {kind} | {label} | {tr:.2f} | {ev:.2f} | {tr + ev:.2f} | {(tr + ev) / base:.2f} | "
                  f"{per_step:.2f} | {per_eval:.2f} | {(tr + ev) / passes * 1e6:.0f} |", flush=True)


def reference_epochs(ref: ReferenceRun, epochs: int) -> list[tuple[float, float]]:
    """(train s, eval s) of each epoch of the PyG run."""
    sync = torch.cuda.synchronize if ref.x.is_cuda else (lambda: None)
    times = []
    for _ in range(epochs):
        sync()
        t0 = time.perf_counter()
        ref.train_epoch()
        sync()
        t1 = time.perf_counter()
        ref.evaluate()
        sync()
        times.append((t1 - t0, time.perf_counter() - t1))
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["accuracy", "speed", "sequence"], default="accuracy")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=None, help="default 30 (accuracy), 8 (speed)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--window", type=int, default=8)
    tta.add_flags(ap, "P=1", scope="speed part: ")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--model", default="gcrn", help="speed part: evolvegcn | gcrn")
    ap.add_argument("--dsbm", default="dsbm:nodes=50000,communities=8,snapshots=12,avg_degree=10,drift=0.05,"
                                      "features=32,signal=0.4,seed=0")
    ap.add_argument("--small", default="dsbm:nodes=700,snapshots=740,avg_degree=2,features=4",
                    help="sequence part: a long sequence of small graphs")
    ap.add_argument("--models", default="gcrn,evolvegcn", help="sequence part")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: gnn-dist's ranks and the PyG reference on the GPU (ranks sharing one GPU stage through "
                         "host memory)")
    a = ap.parse_args()
    a.epochs = a.epochs or {"accuracy": 30, "speed": 8, "sequence": 4}[a.part]
    if a.part == "sequence" and a.ranks == 4 and "--ranks" not in sys.argv:
        a.ranks = 2
    with tempfile.TemporaryDirectory() as d:
        {"accuracy": accuracy, "speed": speed, "sequence": sequence}[a.part](a, Path(d))


if __name__ == "__main__":
    main()
