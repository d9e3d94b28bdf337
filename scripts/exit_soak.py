"""Exit soak: many multi-rank runs in a row, on a loaded machine; every one must exit with its expected code.

    python scripts/exit_soak.py --runs 50 --busy 2

Two kinds of run, `--runs` of each:
- user: a 4-rank user script that trains through gd.Trainer and writes its
  predictions, and never calls close (the context closes itself at exit);
  expected exit code 0 on every rank;
- cli-error: `mpiexec -n 2 gnn-dist train` on a partition without training
  nodes; expected exit code 2 and one error line, for both ranks.
A run that prints "terminate called" or dies of a signal is an abort.
`--busy N` keeps N spinning processes beside the runs (the CI machine has 2
cores and runs 4 ranks). Prints one table; exits non-zero if any run failed.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ENV = dict(os.environ, PYTHONPATH=str(ROOT))  # this checkout's gnn_dist, not whichever one the venv installed
USER_SCRIPT = """
import sys
import numpy as np
import torch
import gnn_dist as gd

ctx = gd.init()  # never closed by hand
graph = gd.load_partition(sys.argv[1], ctx)
torch.manual_seed(0)
model = gd.nn.build_model("gcn", graph.num_features, 8, graph.num_classes)
gd.Trainer(model, graph, ctx, progress=False, eval_every=0).fit(epochs=5)
model.eval()
with torch.no_grad():
    out = model(graph.x, graph)
np.save(f"{sys.argv[2]}/rank{ctx.rank}.npy", out.numpy())
"""


def spin(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def no_train_graph(folder: Path) -> Path:
    """A small graph whose train mask is empty (val and test are not), as an npz in the project's layout."""
    rng = np.random.default_rng(0)
    n = 60
    src, dst = rng.integers(0, n, 300), rng.integers(0, n, 300)
    split = np.arange(n) % 2 == 0
    path = folder / "notrain.npz"
    np.savez(path, src=src, dst=dst, x=rng.standard_normal((n, 4)).astype(np.float32), y=rng.integers(0, 3, n),
             train_mask=np.zeros(n, bool), val_mask=split, test_mask=~split)
    return path


def run_once(kind: str, folder: Path, timeout: float) -> tuple[int, bool, str]:
    if kind == "user":
        out = folder / f"user-{time.monotonic_ns()}"
        out.mkdir()
        cmd = [str(BIN / "mpiexec"), "-n", "4", sys.executable, str(folder / "user.py"), str(folder / "cora-4"),
               str(out)]
    else:
        cmd = [str(BIN / "mpiexec"), "-n", "2", str(BIN / "gnn-dist"), "train", "--partition",
               str(folder / "notrain-2"), "--quiet"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=ENV)
    except subprocess.TimeoutExpired:
        return -1, False, "timeout"
    aborted = "terminate called" in r.stderr or r.returncode in (6, 134, -6) or "signal 6" in r.stderr
    if kind == "user" and r.returncode == 0 and len(list(out.glob("rank*.npy"))) != 4:
        return r.returncode, aborted, "missing outputs"
    return r.returncode, aborted, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50, help="runs of each kind (default 50)")
    ap.add_argument("--busy", type=int, default=2, help="spinning processes beside the runs (default 2)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds one run may take")
    a = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="gnn-dist-soak-"))
    (folder / "user.py").write_text(USER_SCRIPT)
    for spec, parts, name in (("cora", 4, "cora-4"), (f"file:{no_train_graph(folder)}", 2, "notrain-2")):
        subprocess.run([str(BIN / "gnn-dist"), "partition", "--dataset", spec, "--parts", str(parts), "--out",
                        str(folder / name)], check=True, capture_output=True, cwd=ROOT, env=ENV)
    stop = multiprocessing.Event()
    busy = [multiprocessing.Process(target=spin, args=(stop,), daemon=True) for _ in range(a.busy)]
    for p in busy:
        p.start()
    expected = {"user": 0, "cli-error": 2}
    results = {k: [] for k in expected}
    try:
        for i in range(a.runs):
            for kind in expected:
                rc, aborted, last = run_once(kind, folder, a.timeout)
                results[kind].append((rc, aborted, last))
                if rc != expected[kind] or aborted:
                    print(f"run {i} {kind}: exit {rc}{' ABORT' if aborted else ''}: {last}", flush=True)
            print(f"{i + 1}/{a.runs} done", file=sys.stderr, flush=True)
    finally:
        stop.set()
        for p in busy:
            p.join()
    print(f"\n{a.runs} runs of each kind, {a.busy} busy processes beside them\n")
    print("| run | expected exit | runs | as expected | other exit codes | aborts |")
    print("|---|---|---|---|---|---|")
    bad = 0
    for kind, recs in results.items():
        ok = sum(rc == expected[kind] and not ab for rc, ab, _ in recs)
        others = sorted({rc for rc, _, _ in recs if rc != expected[kind]})
        aborts = sum(ab for _, ab, _ in recs)
        bad += len(recs) - ok
        print(f"| {kind} | {expected[kind]} | {len(recs)} | {ok} | {', '.join(map(str, others)) or '-'} | {aborts} |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
