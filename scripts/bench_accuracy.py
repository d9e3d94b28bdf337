"""Final test accuracy of each exchange setting against exact, over several seeds, in one run.

    python scripts/bench_accuracy.py [--dataset cora] [--parts 4] [--models gcn,sage] [--seeds 0,1,2]
                                     [--epochs 200] [--settings exact,int8,int4,adaptive,stale1,stale1-gf,stale1-plain]

Partitions once, trains every (model, setting, seed) with `mpiexec -n P gnn-dist train`,
and prints mean test accuracy per setting with its difference to exact in points.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SETTINGS = {
    "exact": [],
    "int8": ["--codec", "int8"],
    "int4": ["--codec", "int4"],
    "int2": ["--codec", "int2"],
    "adaptive": ["--codec", "adaptive"],
    "stale1": ["--staleness", "1"],  # forward rows smoothed (--stale-momentum 0.95), gradients fresh: the default
    "stale1-gf": ["--staleness", "1", "--stale-grads", "same"],  # PipeGCN-GF: gradients stale and smoothed too
    "stale1-plain": ["--staleness", "1", "--stale-grads", "same", "--stale-momentum", "0"],  # PipeGCN as published
    "adaptive+stale1": ["--codec", "adaptive", "--staleness", "1"],
    "skip0.1": ["--skip-threshold", "0.1"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--models", default="gcn,sage")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--settings", default="exact,int8,int4,adaptive,stale1,stale1-gf,stale1-plain")
    ap.add_argument("--extra", default="--normalize-features", help="flags passed to every training run")
    a = ap.parse_args()
    bin_dir = Path(sys.executable).parent
    gnn, mpiexec = [sys.executable, "-m", "gnn_dist"], str(bin_dir / "mpiexec")
    acc: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        part = Path(tmp) / "part"
        subprocess.run(gnn + ["partition", "--dataset", a.dataset, "--parts", str(a.parts), "--out", str(part)],
                       check=True, capture_output=True)
        for model in a.models.split(","):
            for setting in a.settings.split(","):
                for seed in a.seeds.split(","):
                    cmd = [mpiexec, "-n", str(a.parts), *gnn, "train", "--partition", str(part), "--model", model,
                           "--epochs", str(a.epochs), "--seed", seed, "--eval-every", "0", "--quiet",
                           *a.extra.split(), *SETTINGS[setting]]
                    r = subprocess.run(cmd, capture_output=True, text=True)
                    m = re.search(r"test acc ([0-9.]+)", r.stdout)
                    if r.returncode != 0 or not m:
                        raise SystemExit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
                    acc.setdefault((model, setting), []).append(float(m.group(1)))
                    print(f"[acc] {model} {setting} seed {seed}: {m.group(1)}", file=sys.stderr)
    print(f"\n{a.dataset}, {a.parts} ranks, {a.epochs} epochs, seeds {a.seeds}, extra flags: {a.extra}")
    print(f"{'model':<6} {'setting':<16} {'test acc per seed':<26} {'mean':>7} {'vs exact (points)':>18}")
    for (model, setting), vals in acc.items():
        exact = statistics.mean(acc[(model, "exact")]) if (model, "exact") in acc else float("nan")
        mean = statistics.mean(vals)
        print(f"{model:<6} {setting:<16} {' '.join(f'{v:.4f}' for v in vals):<26} {mean:>7.4f} "
              f"{100 * (mean - exact):>+18.2f}")


if __name__ == "__main__":
    main()
