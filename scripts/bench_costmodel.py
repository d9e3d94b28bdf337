"""The cost model against measured epochs: one row per (where, ranks, graph), appended to a results file.

    python scripts/bench_costmodel.py run --where local --ranks 4 --dataset grid:width=300,height=300 \\
        --machine M.json --results R.jsonl          # mpiexec -n 4 on this host
    python scripts/bench_costmodel.py run --where lab --ranks 4 --rate 1gbit --dataset ... (root)
    python scripts/bench_costmodel.py run --where lab --ranks 4 --rate none --cores 0.45 --hidden 128 --layers 3 ...
    python scripts/bench_costmodel.py table R.jsonl [--repredict]

`run` partitions the graph (the default partition, or per --balance, --objective or --assignment; cached
under --work), measures the machine profile
the prediction uses (`gnn-dist profile-machine --link` among the same ranks, where they will train:
this host, or the lab's namespaces at --rate), trains with --log and that profile, and appends the
measured epoch (mean of the epochs after the first --warmup) beside the prediction its first epoch carries.
One `run` per call, so each fits one hold of the shared-CPU lock. `table` prints the markdown table of
docs/benchmarks.md ("The cost model").
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
GNN = [sys.executable, "-m", "gnn_dist"]


def launch(where: str, ranks: int, args: list[str], port: int) -> None:
    """`gnn-dist ARGS` on `ranks` ranks: under mpiexec here, or one per lab namespace (the lab must be up)."""
    if where == "lab":
        import netlab

        code = netlab.run(GNN + args, port=port, timeout=1800)
    else:
        mpiexec = str(Path(sys.executable).with_name("mpiexec"))
        code = subprocess.run([mpiexec, "-n", str(ranks), *GNN, *args], cwd=ROOT).returncode
    if code != 0:
        raise SystemExit(f"bench_costmodel: `gnn-dist {' '.join(args[:2])}` failed (exit {code})")


def measured(log: Path, warmup: int) -> dict:
    records = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    pred = next(r["prediction"] for r in records if "prediction" in r)
    epochs = [r for r in records if "epoch_time" in r][warmup:]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    compute = [mean([r["rank_compute_s"][k] for r in epochs]) for k in range(len(pred["rank_compute_s"]))]
    return {"epoch_s": mean([r["epoch_time"] for r in epochs]), "epochs": len(epochs), "rank_compute_s": compute,
            "predicted_s": pred["epoch_s"], "bottleneck": pred["bottleneck"], "busiest": pred["busiest"],
            "test_acc": epochs[-1].get("test_acc")}


def run(a: argparse.Namespace) -> None:
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    slug = slug_of(a.dataset)
    variant = "".join(f"-{v}" for v in (a.balance, a.objective) if v) + (f"-{Path(a.assignment).stem}" if a.assignment else "")
    shape = f"-h{a.hidden}l{a.layers}" if (a.hidden, a.layers) != (16, 2) else ""  # what the default is priced for
    part = work / f"{slug}-{a.ranks}{variant}{shape}"
    if not (part / "partition.json").exists():
        flags = ((["--balance", a.balance] if a.balance else []) + (["--objective", a.objective] if a.objective else [])
                 + (["--assignment", a.assignment] if a.assignment else []))
        subprocess.run([*GNN, "partition", "--dataset", a.dataset, "--parts", str(a.ranks), "--out", str(part),
                        "--progress", "none", "--force", "--hidden", str(a.hidden), "--layers", str(a.layers), *flags],
                       cwd=ROOT, check=True)
    hosts = f"-c{a.cores:g}" if a.cores else ""
    tag = f"{a.where}{a.ranks}{'-' + a.rate if a.where == 'lab' else ''}{hosts}-{slug}{variant}{shape}"
    machine, log = work / f"machine-{tag}.json", work / f"{tag}.jsonl"
    log.unlink(missing_ok=True)
    if a.where == "lab":
        import netlab

        netlab.down()
        netlab.up(a.ranks, a.rate, None, cores=a.cores or None, keep_awake=bool(a.cores))
    try:
        if a.where == "lab":  # the lab's profile carries its links' burst too
            import netlab

            if netlab.profile(str(machine), a.port, tag) != 0:
                raise SystemExit("bench_costmodel: profiling the lab failed")
        else:
            launch(a.where, a.ranks, ["profile-machine", "--link", "--out", str(machine), "--name", tag], a.port)
        launch(a.where, a.ranks, ["train", "--partition", str(part), "--epochs", str(a.epochs), "--eval-every", "0",
                                  "--hidden", str(a.hidden), "--layers", str(a.layers), "--log", str(log),
                                  "--machine", str(machine),
                                  "--progress", "none"], a.port + 1)
    finally:
        if a.where == "lab":
            netlab.down()
    row = {"where": a.where, "ranks": a.ranks, "rate": a.rate if a.where == "lab" else "host", "partition": str(part),
           "dataset": a.dataset, "balance": (a.balance or "default") + (f" --objective {a.objective}" if a.objective else "")
           + (f" --assignment {Path(a.assignment).name}" if a.assignment else ""),
           "hidden": a.hidden, "layers": a.layers, "cores": a.cores or None,
           "machine": json.loads(machine.read_text()), **measured(log, a.warmup)}
    with open(a.results, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(f"[bench] {tag}: measured {row['epoch_s']:.4f} s, predicted {row['predicted_s']:.4f} s "
          f"({row['predicted_s'] / row['epoch_s']:.2f}x)", file=sys.stderr)


def repredict(row: dict, work_dir: str) -> dict:
    """The current cost model's prediction for a measured row, from its partition and measured profile (the
    measurement does not depend on the model, so a better model is checked against the same epochs). Lab
    rows measured before profiles carried the links' burst get the lab's (a setting of netlab, not a fit)."""
    import dataclasses

    from partition.costmodel import Workload, predict
    from partition.machine import from_dict
    from partition.part_counts import parts_from_meta
    from partition.store import read_meta

    part = row.get("partition") or str(Path(work_dir) / f"{slug_of(row['dataset'])}-{row['ranks']}")
    meta = read_meta(part)
    machine = from_dict(row["machine"], "row")
    if row["where"] == "lab" and "link_burst_bytes" not in row["machine"]:
        import netlab

        machine = dataclasses.replace(machine, link_burst_bytes=float(netlab.BURST_BYTES))
    work = Workload(meta["num_features"], meta["num_classes"], row["hidden"], row.get("layers", 2))
    pred = predict(parts_from_meta(meta), work, machine)
    # the busiest rank's compute in wall seconds: the phases' makespans, less the meetings beyond them
    return dict(row, predicted_s=pred.epoch_s, bottleneck=pred.bottleneck, busiest=pred.busiest,
                predicted_compute_s=pred.epoch_s - pred.meetings_s - machine.epoch_fixed_s)


def slug_of(dataset: str) -> str:
    return dataset.replace(":", "-").replace(",", "-").replace("=", "")


# What another checkout's cost model predicts for each row (stdin: the rows; stdout: a JSON list of seconds), run
# there with its own `partition`: the profile's fields that checkout does not know are dropped (they are
# measurements its model does not use).
BASELINE = """
import dataclasses, json, sys
from partition.costmodel import Workload, predict
from partition.part_counts import parts_from_meta
from partition.machine import Machine, from_dict
from partition.store import read_meta
known = {f.name for f in dataclasses.fields(Machine)}
out = []
for row in json.load(sys.stdin):
    meta = read_meta(row["partition"])
    machine = from_dict({k: v for k, v in row["machine"].items() if k in known}, "row")
    work = Workload(meta["num_features"], meta["num_classes"], row["hidden"], row.get("layers", 2))
    out.append(predict(parts_from_meta(meta), work, machine).epoch_s)
print(json.dumps(out))
"""


def baseline(rows: list[dict], checkout: str) -> list[float]:
    """Each row's epoch as the cost model of `checkout` (e.g. main's worktree) predicts it."""
    done = subprocess.run([sys.executable, "-c", BASELINE], input=json.dumps(rows), capture_output=True, text=True,
                          cwd=checkout, env={**os.environ, "PYTHONPATH": checkout})
    if done.returncode != 0:
        raise SystemExit(f"bench_costmodel: pricing with {checkout} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout)


ROW_KEYS = {"where", "ranks", "rate", "dataset", "balance", "hidden", "machine", "epoch_s", "predicted_s",
            "bottleneck", "busiest"}  # what `run` records and `table` prints


def table(path: str, work_dir: str, again: bool, split: bool = False, against: str = "") -> None:
    if against and not (Path(against) / "partition" / "costmodel.py").is_file():
        raise SystemExit(f"bench_costmodel: --baseline {against} is not a gnn-dist checkout (no partition/costmodel.py)")
    try:
        rows = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    except (OSError, ValueError) as e:
        raise SystemExit(f"bench_costmodel: results {path} cannot be read as JSON lines: {e}") from None
    for k, r in enumerate(rows):
        missing = sorted(ROW_KEYS - set(r)) if isinstance(r, dict) else ["(not a JSON object)"]
        if missing:
            raise SystemExit(f"bench_costmodel: row {k + 1} of {path} is not a `run` record: lacks {', '.join(missing)}")
        if split and "rank_compute_s" not in r:
            raise SystemExit(f"bench_costmodel: --split needs each rank's compute, which row {k + 1} of {path} "
                             "lacks (recorded before it was logged): run it again")
    if again or split:
        sys.path.insert(0, str(ROOT))
        from partition.errors import GnnDistError

        try:
            rows = [repredict(r, work_dir) for r in rows]
        except GnnDistError as e:  # a row's partition folder gone or edited, a profile out of range
            raise SystemExit(f"bench_costmodel: cannot predict a row again: {e}") from None
    if split:
        split_table(rows)
        return
    base = baseline(rows, against) if against else None
    extra = ("", "") if base is None else (" baseline predicted s | baseline / measured |", "---|---|")
    print("| where | ranks | link | graph | partition | measured epoch s |" + extra[0] + " predicted s | "
          "predicted / measured | bottleneck (busiest rank) |")
    print("|---|---|---|---|---|---|" + extra[1] + "---|---|---|")
    for k, r in enumerate(rows):
        b = "" if base is None else f" {base[k]:.4f} | {base[k] / r['epoch_s']:.2f} |"
        link = r["rate"] + (f", {r['cores']:g} core hosts" if r.get("cores") else "")
        print(f"| {r['where']} | {r['ranks']} | {link} | `{r['dataset']}` | {r['balance']} | {r['epoch_s']:.4f} |"
              f"{b} {r['predicted_s']:.4f} | {r['predicted_s'] / r['epoch_s']:.2f} | {r['bottleneck']} ({r['busiest']}) |")
    near = lambda v: sum(abs(x / r["epoch_s"] - 1) <= 0.2 for x, r in zip(v, rows))  # noqa: E731
    print(f"\nwithin 20%: {near([r['predicted_s'] for r in rows])} of {len(rows)}"
          + ("" if base is None else f" (baseline: {near(base)})"))


def split_table(rows: list[dict]) -> None:
    """The epoch in parts: measured, the busiest rank's compute (the largest rank's mean compute seconds) and
    the rest (waiting on the wire and on other ranks); predicted, the phases' makespans of the graph's work,
    the meetings beyond them, and the profile's fixed epoch (Python, autograd, exchange machinery, wake-ups:
    in training part compute, part waiting)."""
    print("| where | ranks | graph | compute measured s | rest measured s | phases predicted s | meetings predicted s | "
          "fixed epoch s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        mc, pc, fixed = max(r["rank_compute_s"]), r["predicted_compute_s"], r["machine"].get("epoch_fixed_s", 0.0)
        print(f"| {r['where']} | {r['ranks']} | `{r['dataset'].split(':')[0]}` | {mc:.4f} | {r['epoch_s'] - mc:.4f} | "
              f"{pc:.4f} | {r['predicted_s'] - pc - fixed:.4f} | {fixed:.4f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--where", choices=["local", "lab"], required=True)
    r.add_argument("--ranks", type=int, required=True)
    r.add_argument("--rate", default="1gbit", help="lab: tc rate per link and direction")
    r.add_argument("--dataset", required=True)
    r.add_argument("--balance", default="", help="partition's --balance (default: the cost model's choice)")
    r.add_argument("--objective", default="", help="partition's --objective (default: the cost model's choice)")
    r.add_argument("--assignment", default="", metavar="PARTS.npy",
                   help="partition's --assignment: a node -> part array made elsewhere (candidates compared offline)")
    r.add_argument("--hidden", type=int, default=16)
    r.add_argument("--layers", type=int, default=2)
    r.add_argument("--cores", type=float, default=0.0,
                   help="lab: emulated hosts of this many cores each (netlab up --cores-per-host; idle spinners on)")
    r.add_argument("--epochs", type=int, default=12)
    r.add_argument("--warmup", type=int, default=2, help="epochs left out of the mean (default 2)")
    r.add_argument("--work", default="/tmp/gnn-costbench")
    r.add_argument("--results", required=True)
    r.add_argument("--port", type=int, default=29600)
    t = sub.add_parser("table")
    t.add_argument("results")
    t.add_argument("--repredict", action="store_true",
                   help="predict each row again with the current cost model (its partition and measured profile)")
    t.add_argument("--split", action="store_true",
                   help="the busiest rank's compute and the rest of the epoch, measured beside predicted (repredicts)")
    t.add_argument("--work", default="/tmp/gnn-costbench")
    t.add_argument("--baseline", default="", metavar="CHECKOUT",
                   help="also the predictions of the cost model in CHECKOUT (e.g. main's worktree), side by side")
    a = ap.parse_args()
    if a.cmd == "run" and a.assignment and (a.balance or a.objective):
        ap.error("--assignment takes the parts as given: drop --balance and --objective")
    run(a) if a.cmd == "run" else table(a.results, a.work, a.repredict, a.split, a.baseline)


if __name__ == "__main__":
    main()
