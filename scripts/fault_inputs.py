"""Hostile inputs and flag combinations for scripts/fault_table.py: the files they need, and their expectations.

Issue 32's measurements beyond a failing rank: an edge list with one id of 2^31+5 (was OOM-killed at
23.7 GB), an empty edge list, labels of 99 and -1, a PyG-Temporal file whose fields disagree,
`--model gat --staleness 1` (crashed at the first step), a resume under `--staleness 1` (was inexact),
and the dropout masks of a `--codec int8` run (drew from the codec's stream).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

BIG = 2**31 + 5
# every rank compares the hidden dropout masks a short fp32 run and a short int8 run draw (the spy of
# tests/resume_worker.py), and says whether the int8 run's messages changed anything at all (its losses)
MASKS = """
import sys
import numpy as np
import torch
from gnn_dist.graph.load import load_partition
from gnn_dist.nn import build_model
from gnn_dist.runtime.exchange import ExchangeConfig
from gnn_dist.runtime.launch import init
from gnn_dist.train.node import Trainer
from tests.resume_worker import record_masks

ctx = init()
masks, drawn, losses = record_masks(), {}, {}
for codec in ("fp32", "int8"):
    del masks[:]
    graph = load_partition(sys.argv[1], ctx, exchange=ExchangeConfig(codec=codec))
    torch.manual_seed(0)
    model = build_model("gcn", graph.num_features, 16, graph.num_classes, layers=2, dropout=0.5)
    trainer = Trainer(model, graph, ctx, seed=0, eval_every=0, progress=False)
    trainer.fit(4)
    drawn[codec], losses[codec] = list(masks), [r["loss"] for r in trainer.history]
same = len(drawn["fp32"]) == len(drawn["int8"]) > 0 and all(map(np.array_equal, drawn["fp32"], drawn["int8"]))
mine = (len(drawn["fp32"]), same, losses["fp32"] != losses["int8"])
every = [None] * ctx.world_size if ctx.rank == 0 else None
torch.distributed.gather_object(mine, every, dst=0)  # one line from rank 0: ranks' lines would interleave
if ctx.rank == 0:
    print(f"masks per rank {[n for n, _, _ in every]}, int8's "
          f"{'equal' if all(s for _, s, _ in every) else 'DIFFER FROM'} fp32's on every rank; losses "
          f"{'differ' if every[0][2] else 'EQUAL'}", flush=True)
ctx.close()
"""


def write_inputs(folder: Path) -> dict[str, Path]:
    """The hostile files: edge lists, labelled graphs, PyG-Temporal JSON; and the masks script."""
    np.savetxt(folder / "big-id.csv", [[0, 1], [1, 2], [2, BIG], [BIG, 0]], fmt="%d", delimiter=",",
               header="src,dst", comments="")
    (folder / "empty.csv").write_text("")
    rng = np.random.default_rng(0)
    n = 60
    y = np.arange(n) % 4
    x = rng.normal(size=(n, 4)).astype(np.float32)
    ring = {"src": np.arange(n), "dst": (np.arange(n) + 1) % n, "x": x, "train_mask": np.arange(n) < 30,
            "val_mask": (np.arange(n) >= 30) & (np.arange(n) < 45), "test_mask": np.arange(n) >= 45}
    np.savez(folder / "label99.npz", **ring, y=np.where(np.arange(n) == 7, 99, y))
    np.savez(folder / "label-1.npz", **ring, y=np.where(np.arange(n) == 7, -1, y))
    series = rng.normal(size=(12, 6)).round(3).tolist()
    edges = [[i, (i + 1) % 6] for i in range(6)]
    (folder / "periods.json").write_text(json.dumps({"edges": edges, "weights": [1.0] * 6, "X": series,
                                                     "time_periods": 13}))
    (folder / "weights.json").write_text(json.dumps({"edges": edges, "weights": [1.0] * 4, "X": series}))
    (folder / "masks.py").write_text(MASKS)
    return {name: folder / name for name in ("big-id.csv", "empty.csv", "label99.npz", "label-1.npz",
                                              "periods.json", "weights.json", "masks.py")}


def input_cases(make_case, p: dict, folder: Path) -> list:
    """Cases for hostile files (one `gnn-dist partition` process each) and for flags that once failed."""
    def partition(spec: str, out: str) -> list[str]:
        return ["-m", "gnn_dist", "partition", "--dataset", spec, "--parts", "2", "--out", str(folder / out)]

    one = ("single",)
    train = ["-m", "gnn_dist", "train", "--quiet", "--eval-every", "0", "--partition", str(p["cora2"])]
    resume = train + ["--staleness", "1", "--seed", "3", "--checkpoint-dir", str(folder / "stale-ckpt")]
    return [
        make_case("big-id", 1, partition(f"edges:{p['big-id.csv']}", "big-id"),
                  "partitions: ids compacted, one note, small peak memory (under a 4 GiB address-space cap)",
                  launches=one, limit_gb=4.0),
        make_case("empty-csv", 1, partition(f"edges:{p['empty.csv']}", "empty"), "one line, exit 2", launches=one),
        make_case("label-99", 1, partition(f"file:{p['label99.npz']}", "l99"), "one line, exit 2", launches=one),
        make_case("label-minus-1", 1, partition(f"file:{p['label-1.npz']}", "l-1"),
                  "-1 in the train mask: one line, exit 2", launches=one),
        make_case("json-periods", 1, partition(f"json:{p['periods.json']}", "jp"),
                  "time_periods 13 for 12 periods: one line, exit 2", launches=one),
        make_case("json-weights", 1, partition(f"json:{p['weights.json']}", "jw"),
                  "4 weights for 6 edges: one line, exit 2", launches=one),
        make_case("gat-stale", 2, train + ["--model", "gat", "--staleness", "1", "--epochs", "5"],
                  "trains, every rank 0"),
        make_case("stale-resume", 2, resume + ["--epochs", "12", "--resume", "--log", str(folder / "resumed.jsonl")],
                  "the resumed epochs' losses equal the uninterrupted run's, bit for bit", launches=("mpiexec",),
                  before=[train + ["--staleness", "1", "--seed", "3", "--epochs", "12", "--log",
                                   str(folder / "straight.jsonl")],
                          resume + ["--epochs", "6", "--checkpoint-every", "6"]],
                  check=lambda: compare_losses(folder / "straight.jsonl", folder / "resumed.jsonl")),
        make_case("int8-masks", 2, [str(p["masks.py"]), str(p["cora2"])],
                  "an int8 run draws the fp32 run's hidden dropout masks", launches=("mpiexec",)),
    ]


def compare_losses(straight: Path, resumed: Path) -> str:
    """Whether the resumed run's epochs have the uninterrupted run's losses, bit for bit."""
    def losses(log: Path) -> dict[int, float]:
        rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return {r["epoch"]: r["loss"] for r in rows if "loss" in r}

    a, b = losses(straight), losses(resumed)
    if not b or not set(b) <= set(a):
        return f"NO COMPARISON (epochs {sorted(b)} resumed, {len(a)} straight)"
    same = all(a[e] == b[e] for e in b)
    last = max(b)
    return (f"epochs {min(b)}-{last} resumed: {'equal' if same else 'DIFFERENT'} (epoch {last}: {b[last]!r} "
            f"resumed, {a[last]!r} straight)")


def run_before(argvs: list[list[str]], ranks: int, mpiexec: Path, env: dict, cwd: Path) -> str:
    """The commands a case needs first (under mpiexec); '' if they all succeeded, else what failed."""
    for argv in argvs:
        r = subprocess.run([str(mpiexec), "-n", str(ranks), sys.executable, *argv], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            return f"a step before it failed ({r.returncode}): {r.stderr.strip().splitlines()[-1:]}"
    return ""
