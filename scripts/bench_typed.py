"""Typed graphs: bytes per epoch of R-GCN (with and without relation-aggregation-first) and HeteroConv.

One run partitions a typed SBM, then trains R-GCN on P ranks with the row
exchange and with relation aggregates first (`--relagg`), and HeteroConv over
per-relation SAGE layers (`--model hsage`), several seeds each,
and prints one table: halo rows the plans send per layer and direction (all
ranks), bytes all ranks sent per training epoch (measured), and final test accuracy;
then each run's time to accuracy (gnn_dist.train.tta; evaluated every --eval-every
epochs, timed apart; target: seed 0's row exchange's final test accuracy minus 0.3 points, or --target).

    python scripts/bench_typed.py [--ranks 4] [--epochs 50] [--seeds 3] [--device cpu|cuda]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnn_dist.train import tta  # noqa: E402

MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", action="append", default=None,
                    help="typed graph spec; repeat for several (default: two typed SBMs, few and prolific authors)")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=32)
    tta.add_flags(ap, "seed 0's row exchange")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: the ranks on the GPU (ranks sharing one GPU stage through host memory)")
    a = ap.parse_args()
    common = "venues=16,classes=4,homophily=0.6,signal=0.5,paper_signal=0.2,seed=0"
    for spec in a.dataset or [f"hsbm:papers=20000,authors=12000,{common}",
                              f"hsbm:papers=20000,authors=2000,writes=6,{common}"]:
        bench(spec, a)


def bench(spec: str, a: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as d:
        part = Path(d) / "part"
        run([sys.executable, "-m", "gnn_dist", "partition", "--dataset", spec, "--parts", str(a.ranks),
             "--out", str(part)])
        meta = json.loads((part / "partition.json").read_text())
        ra = meta["relagg"]
        print(f"\n{spec}\n{meta['graph']}: {meta['num_nodes']} nodes ({', '.join(f'{t} {n}' for t, n in zip(meta['node_types'], meta['node_counts']))}), "  # noqa: E501
              f"{meta['num_edges']} edges, {len(meta['edge_types'])} relations, {a.ranks} parts; "
              f"{ra['relations_aggregated']} of {ra['pair_relations']} (owner, receiver, relation) triples aggregated")
        rows, runs = {}, {}
        for name, model, extra in (("row exchange", "rgcn", []), ("relation aggregates first", "rgcn", ["--relagg"]),
                                   ("HeteroConv(SAGE): one halo per layer", "hsage", [])):
            accs, sent = [], []
            for seed in range(a.seeds):
                log = Path(d) / f"{model}-{len(extra)}-{seed}.jsonl"
                run([MPIEXEC, "-n", str(a.ranks), sys.executable, "-m", "gnn_dist", "train", "--partition", str(part),
                     "--model", model, "--hidden", str(a.hidden), "--epochs", str(a.epochs), "--seed", str(seed),
                     "--eval-every", str(a.eval_every), "--quiet", "--log", str(log), *extra,
                     *(["--backend", "gloo"] if a.device == "cpu" else [])])
                recs = [json.loads(x) for x in log.read_text().splitlines()]
                runs[f"{name.split(':')[0]}, seed {seed}"] = recs
                accs.append(recs[-1]["test_acc"])
                sent.append(np.mean([r["halo_bytes_all_ranks"] for r in recs]))
            rows[name] = (float(np.mean(sent)), accs)
        plan_rows = {"row exchange": ra["raw_rows"], "relation aggregates first": ra["relagg_rows"],
                     "HeteroConv(SAGE): one halo per layer": ra["raw_rows"]}
        base = rows["row exchange"][0]
        print("\n| exchange | rows per layer and direction (all ranks) | bytes per epoch (all ranks) | x R-GCN row exchange | "
              "test acc (seeds) | mean |")
        print("|---|---|---|---|---|---|")
        for name, (b, accs) in rows.items():
            print(f"| {name} | {plan_rows[name]} | {b / 1e6:.2f} MB | {b / base:.3f} | "
                  f"{' / '.join(f'{x:.4f}' for x in accs)} | {np.mean(accs):.4f} |", flush=True)
        target = a.target if a.target is not None else tta.default_target(runs["row exchange, seed 0"])
        print(f"\n{tta.table(runs, target)}")


if __name__ == "__main__":
    main()
