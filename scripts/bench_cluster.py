"""A cluster in a box: speedup and capacity against the number of emulated hosts (needs root: scripts/netlab.py).

    python scripts/bench_cluster.py fidelity [--dataset SPEC] [--cores 0.25,0.5,1] [--repeat 3]
    python scripts/bench_cluster.py sweep [--quick] [--graphs sbm,rmat,grid] [--hosts 1,2,4,8] [--cores 0.22]
                                          [--rates 200mbit,1gbit] [--repeat 3] [--epochs 5] [--tta-epochs 20]
    python scripts/bench_cluster.py capacity [--hosts 1,2,4,8] [--memory 2G] [--start 250000]
    python scripts/bench_cluster.py table [--png-dir docs]

Every host is a network namespace with a CPU quota and, for capacity, a memory limit of its own
(`netlab.py up --cores-per-host C --memory-per-host M`), one rank each; partitions are made outside them.
`fidelity` checks the emulation: one rank at C cores against the same rank pinned to one CPU with one
thread, over C, and a rank at 0.45 core with the threads it picks against --threads 1 and 2. `sweep`
trains GCN (3 layers, hidden 128) on P = 1, 2, 4, 8 hosts, exact (input cache on) at every rate,
`--codec adaptive` and `--exchange auto` at the last rate only; `--repeat` short runs per row (the rows
of one repeat interleaved), and, for time to accuracy, one longer run per setting and P
(exact's once, at P=1 without a quota: exact training does not depend on P). `capacity` finds, per P,
the largest SBM that trains 3 epochs within M per host, by doubling and then bisecting to within 10%.

Each run appends one JSON line to --results; run again, a command skips what that file already holds, so
a long sweep resumes where it stopped. `table` (scripts/cluster_report.py) prints the tables of
docs/benchmarks.md ("A cluster in a box") and draws the speedup and capacity plots.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import keepawake  # noqa: E402
import netlab  # noqa: E402

GNN = [sys.executable, "-m", "gnn_dist"]
MODEL = ["--model", "gcn", "--layers", "3", "--hidden", "128"]
GRAPHS = {"sbm": "sbm:nodes=1000000,avg_degree=16,homophily=0.9,features=128,classes=16",
          "rmat": "rmat:scale=20,edges=16000000,features=128",
          "grid": "grid:width=1000,height=1000,features=128"}
SETTINGS = {"exact": [], "adaptive": ["--codec", "adaptive"], "auto": ["--exchange", "auto"]}
CAPACITY_SBM = "sbm:nodes={n},avg_degree=16,homophily=0.9,features=128,classes=16"


class Results:
    """The JSON lines of every run so far; `done(**key)` finds a row already measured."""

    def __init__(self, path: Path):
        self.path = path
        self.rows = []
        for i, line in enumerate(path.read_text().splitlines() if path.exists() else [], 1):
            try:
                row = json.loads(line) if line.strip() else None
            except json.JSONDecodeError:  # a line cut off by a crash: that run is measured again
                row = False
            if isinstance(row, dict) and "kind" in row:
                self.rows.append(row)
            elif row is not None:
                print(f"[cluster] {path}:{i}: not a result row, skipped", file=sys.stderr)

    def done(self, **key) -> dict | None:
        return next((r for r in self.rows if all(r.get(k) == v for k, v in key.items())), None)

    def add(self, row: dict) -> dict:
        self.rows.append(row)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:  # one line per run: a run cut short leaves at most its own line out
            f.write(json.dumps(row) + "\n")
        return row


class Lab:
    """The lab as the next runs need it: brought up again only when hosts, rate or limits change."""

    def __init__(self):
        self.config = None

    def use(self, hosts: int, rate: str, cores: float | None = None, memory: int | None = None,
            period: int | None = None) -> None:
        config = (hosts, rate, cores, memory, period)
        if config != self.config:
            self.close()
            netlab.down()
            netlab.up(hosts, rate, None, cores, memory, period)
            self.config = config

    def close(self) -> None:
        if self.config is not None:
            netlab.down()
            self.config = None


def settings_list(text: str) -> list[str]:
    """--settings: names from SETTINGS, comma-separated."""
    names = [x for x in text.split(",") if x]
    if not names or set(names) - set(SETTINGS):
        raise argparse.ArgumentTypeError(f"choose from {', '.join(SETTINGS)}, got {text!r}")
    return names


def partition(spec: str, parts: int, work: Path) -> Path:
    """The default partition of `spec` into `parts`, priced for the model trained here (made once, outside the hosts)."""
    out = work / f"{spec.split(':')[0]}-{zlib.crc32(spec.encode()):08x}-{parts}"
    if not (out / "partition.json").exists():
        t = time.perf_counter()
        r = subprocess.run([*GNN, "partition", "--dataset", spec, "--parts", str(parts), "--out", str(out), "--hidden",
                            "128", "--layers", "3", "--progress", "none", "--force"], cwd=ROOT, capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise SystemExit(f"bench_cluster: partitioning {spec} into {parts} failed: "
                             f"{(r.stderr.strip().splitlines() or ['exit ' + str(r.returncode)])[-1]}")
        print(f"[cluster] partitioned {spec} into {parts} ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    return out


def train_args(part: Path, log: Path, epochs: int, eval_every: int, extra: list[str]) -> list[str]:
    log.unlink(missing_ok=True)
    return [*GNN, "train", "--partition", str(part), *MODEL, "--epochs", str(epochs), "--eval-every", str(eval_every),
            "--log", str(log), "--progress", "none", "--no-verify", "--timeout", "3600", *extra]


def measure(log: Path, warmup: int, rate: str) -> dict:
    """A run's figures from its log: median epoch after `warmup`, each epoch's bound, the prediction, TTA's records."""
    records = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    epochs = [r for r in records if "epoch_time" in r]
    timed = epochs[warmup:] or epochs
    bps = netlab.rate_bytes_per_s(rate)
    bounds = [max(c + max(0.0, max(s, r) / bps - o) for c, s, r, o in zip(
        e["rank_compute_s"], e["rank_sent_bytes"], e["rank_recv_bytes"], e["rank_overlap_s"])) for e in timed]
    first = epochs[0]
    keep = ("epoch", "epoch_time", "eval_time", "val_acc", "test_acc")
    return {"epoch_s": statistics.median(e["epoch_time"] for e in timed), "epochs_timed": len(timed),
            "bound_s": statistics.median(bounds), "predicted_s": (first.get("prediction") or {}).get("epoch_s"),
            "threads": first.get("rank_threads"), "usable_cpus": first.get("rank_usable_cpus"),
            "compute_max_s": statistics.median(max(e["rank_compute_s"]) for e in timed),
            "rank_compute_s": [statistics.median(c) for c in zip(*(e["rank_compute_s"] for e in timed))],
            "bytes_max": statistics.median(max(max(e["rank_sent_bytes"]), max(e["rank_recv_bytes"])) for e in timed),
            "test_acc": next((r["test_acc"] for r in reversed(records) if "test_acc" in r), None),
            "records": [{k: r[k] for k in keep if k in r} for r in epochs]}


def lab_run(res: Results, key: dict, part: Path, work: Path, epochs: int, eval_every: int, extra: list[str],
            rate: str, warmup: int = 1) -> dict:
    """One training run on the lab's hosts, measured and appended to the results (skipped if there already)."""
    if (row := res.done(**key)) is not None:
        return row
    log = work / "run.jsonl"
    t = time.perf_counter()
    for g in netlab.host_groups(netlab.load_state()):  # the lab stays up across runs: each row its own peak
        if g is not None:
            g.reset_peak()
    codes, lost = netlab.launch(train_args(part, log, epochs, eval_every, extra), timeout=4 * 3600)
    if any(codes):
        why = f"rank {lost[0]} lost (out of memory)" if lost else f"exit codes {codes}"
        raise SystemExit(f"bench_cluster: {key}: {why}")
    peaks = [g.usage()["peak_bytes"] for g in netlab.host_groups(netlab.load_state()) if g is not None]
    row = res.add(dict(key, **measure(log, warmup, rate), wall_s=round(time.perf_counter() - t, 1), peak_bytes=peaks))
    print(f"[cluster] {key}: {row['epoch_s']:.3f} s/epoch (bound {row['bound_s']:.3f}), {row['wall_s']:.0f} s",
          file=sys.stderr)
    return row


# ------------------------------------------------------------------------------------------ fidelity
PINNED_CPU = "1"  # the CPU of fidelity's pinned runs (and of its host, with --pin-host)


def fidelity(a: argparse.Namespace, res: Results, lab: Lab) -> None:
    """Each config between two runs pinned to one CPU (this box's speed drifts by tens of percent over minutes:
    a config is judged against its neighbours, not against a median taken at other times)."""
    part = partition(a.dataset, 1, a.work)
    pinned = ("pinned", None, ["--threads", "1"])
    configs = [(f"C={c:g}", c, []) for c in a.cores] + \
              [(f"C=0.45 {t}", 0.45, flags) for t, flags in (("auto", []), ("--threads 1", ["--threads", "1"]),
                                                             ("--threads 2", ["--threads", "2"])) if a.thread_rows]
    pin = ["taskset", "-c", PINNED_CPU]
    for rep in range(a.repeat):
        order = [x for c in configs for x in (pinned, c)] + [pinned]
        for seq, (name, cores, flags) in enumerate(order):
            key = {"kind": "fidelity", "dataset": a.dataset, "config": name, "rep": rep, "seq": seq,
                   "period": a.cfs_period_us, "pin_host": a.pin_host or None}
            if res.done(**key):
                continue
            log = a.work / "run.jsonl"
            cmd = train_args(part, log, a.epochs, 0, flags)
            t = time.perf_counter()
            if cores is None:  # one CPU, no quota, no lab
                lab.close()
                r = subprocess.run([*pin, *cmd], cwd=ROOT, capture_output=True, text=True)
                if r.returncode != 0:
                    raise SystemExit(f"bench_cluster: fidelity {name} failed: {r.stderr.strip()[-300:]}")
                delivered = None
            else:
                lab.use(1, "none", cores, None, a.cfs_period_us)
                host = netlab.host_groups(netlab.load_state())[0]
                cpu0 = host.usage()["cpu_s"]
                if netlab.run([*pin, *cmd] if a.pin_host else cmd, timeout=4 * 3600) != 0:
                    raise SystemExit(f"bench_cluster: fidelity {name} failed")
                delivered = (host.usage()["cpu_s"] - cpu0) / (time.perf_counter() - t)  # cores the host got
            row = res.add(dict(key, cores=cores, delivered=delivered, **measure(log, 1, "none")))
            print(f"[cluster] fidelity {name} #{rep}: {row['epoch_s']:.3f} s/epoch, threads {row['threads']}",
                  file=sys.stderr)


# ------------------------------------------------------------------------------------------ sweep
def sweep(a: argparse.Namespace, res: Results, lab: Lab) -> None:
    """Per graph and repeat: P hosts at C cores for each P, exact at every rate, adaptive and auto at the last."""
    t0 = time.perf_counter()
    for graph in a.graphs:  # the repeats outside P: this box's drift over minutes falls on every row alike
        spec = GRAPHS.get(graph, graph)
        if set(a.settings) - {"exact"}:  # the target of their time-to-accuracy runs
            reference(a, res, spec)
        parts = {p: partition(spec, p, a.work) for p in a.hosts}
        for rep in range(a.repeat):
            for p, part in parts.items():
                for rate in (["none"] if p == 1 else a.rates):
                    settings = ["exact"] if p == 1 or rate != a.rates[-1] else a.settings
                    for s in settings:
                        tta = rep == 0 and s != "exact"  # one longer run per setting and P gives its epochs to target
                        key = {"kind": "sweep", "graph": spec, "P": p, "rate": rate, "cores": a.cores, "setting": s,
                               "rep": rep}
                        if not res.done(**key):
                            lab.use(p, rate, a.cores)
                        lab_run(res, dict(key, tta=tta), part, a.work, a.tta_run_epochs if tta else a.epochs,
                                1 if tta else 0, SETTINGS[s], rate)
    lab.close()
    print(f"[cluster] sweep done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def reference(a: argparse.Namespace, res: Results, spec: str) -> dict:
    """Exact training's epochs to the target at P=1, outside the lab: exact results do not depend on P or cores."""
    key = {"kind": "reference", "graph": spec, "epochs": a.tta_epochs}
    if (row := res.done(**key)) is not None:
        return row
    part = partition(spec, 1, a.work)
    log = a.work / "run.jsonl"
    if subprocess.run(train_args(part, log, a.tta_epochs, 1, []), cwd=ROOT).returncode != 0:
        raise SystemExit(f"bench_cluster: exact's reference run on {spec} failed (its last line is above)")
    return res.add(dict(key, **measure(log, 1, "none")))


# ------------------------------------------------------------------------------------------ capacity
def capacity(a: argparse.Namespace, res: Results, lab: Lab) -> None:
    """Per P: grow the SBM from --start nodes per host until a host runs out of memory, then bisect to within 10%."""
    for p in a.hosts:
        ok, bad, n = 0, None, a.start * p
        while True:
            row = trial(a, res, lab, p, n)
            if row["ok"]:
                ok = n
            else:
                bad = n
            n = next_size(ok, bad, row, a.memory)
            if n is None:
                break
        print(f"[cluster] capacity P={p}: {ok} nodes train, {bad} do not", file=sys.stderr)
    lab.close()


def next_size(ok: int, bad: int | None, last: dict, memory: int) -> int | None:
    """The next trial's nodes, or None when [ok, bad] is within 10%. Until a trial fails: double, but no further
    than where the last success's peak, scaled linearly to the limit, says memory runs out (at least +10%): each
    trial costs a partition, minutes at millions of nodes, and memory grows about linearly with nodes. Then bisect."""
    if bad is None:
        peak = max((x or 0 for x in last.get("peak_bytes") or []), default=0)
        guess = int(ok * 0.98 * memory / peak) if peak else 2 * ok
        return max(ok + 1000, max(ok * 11 // 10, min(2 * ok, guess)) // 1000 * 1000)
    if ok and (bad - ok) / ok <= 0.10:
        return None
    nxt = (ok + bad) // 2 // 1000 * 1000 if ok else bad // 2 // 1000 * 1000
    return None if nxt in (ok, bad) or nxt < 1000 else nxt


def trial(a: argparse.Namespace, res: Results, lab: Lab, p: int, n: int) -> dict:
    """Partition an SBM of `n` nodes outside the hosts; train 3 epochs on P hosts of --memory each."""
    key = {"kind": "capacity", "P": p, "nodes": n, "memory": a.memory}
    if (row := res.done(**key)) is not None:
        return row
    t = time.perf_counter()
    part = partition(CAPACITY_SBM.format(n=n), p, a.work)
    lab.use(p, "none", None, a.memory)
    codes, lost = netlab.launch(train_args(part, a.work / "run.jsonl", 3, 0, []), timeout=4 * 3600)
    peaks = [g.usage()["peak_bytes"] for g in netlab.host_groups(netlab.load_state())]
    lab.close()  # fresh groups, and peaks, for the next trial
    shutil.rmtree(part)
    if any(codes) and not lost:
        raise SystemExit(f"bench_cluster: capacity P={p}, {n} nodes failed without running out of memory: {codes}")
    row = res.add(dict(key, ok=not any(codes), lost=lost, peak_bytes=peaks, wall_s=round(time.perf_counter() - t, 1)))
    print(f"[cluster] capacity P={p} {n} nodes: {'trains' if row['ok'] else f'rank {lost[0]} lost (out of memory)'}"
          f", peak {max(x or 0 for x in peaks) / 2**20:.0f} MiB", file=sys.stderr)
    return row


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=ROOT / "out" / "cluster" / "results.jsonl")
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "cluster", help="partitions and logs")
    ap.add_argument("--no-keep-awake", dest="keep_awake", action="store_false",
                    help="no SCHED_IDLE spinners on the box's CPUs (netlab.py up --keep-awake: why they are there)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    floats = lambda s: [float(x) for x in s.split(",")]  # noqa: E731
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    f = sub.add_parser("fidelity", help="one rank at C cores against one pinned CPU over C; threads at 0.45 core")
    f.add_argument("--dataset", default="sbm:nodes=200000,avg_degree=16,homophily=0.9,features=128,classes=16")
    f.add_argument("--cores", type=floats, default=[0.25, 0.5, 1.0])
    f.add_argument("--repeat", type=int, default=3)
    f.add_argument("--epochs", type=int, default=6)
    f.add_argument("--cfs-period-us", type=int, default=None, help="the quota's period (default: netlab's)")
    f.add_argument("--pin-host", action="store_true",
                   help="run the host's rank on the pinned run's CPU too (taskset): the quota alone is compared, "
                        "without migrations between CPUs")
    f.add_argument("--no-thread-rows", dest="thread_rows", action="store_false",
                   help="only the C rows, not the 0.45-core thread-count rows")
    s = sub.add_parser("sweep", help="strong scaling on P emulated hosts at C cores each")
    s.add_argument("--quick", action="store_true", help="the SBM only")
    s.add_argument("--graphs", nargs="+", default=list(GRAPHS), metavar="GRAPH",
                   help=f"names ({', '.join(GRAPHS)}) or data set specs (default: all three)")
    s.add_argument("--hosts", type=ints, default=[1, 2, 4, 8])
    s.add_argument("--cores", type=float, default=0.22)
    s.add_argument("--rates", type=lambda x: x.split(","), default=["200mbit", "1gbit"],
                   help="link rates; adaptive and auto run at the last only")
    s.add_argument("--repeat", type=int, default=3)
    s.add_argument("--settings", type=settings_list, default=list(SETTINGS),
                   help=f"what runs at the last rate (default {','.join(SETTINGS)}; exact alone: no time to accuracy)")
    s.add_argument("--epochs", type=int, default=5, help="epochs of a timing run (the first is warm-up)")
    s.add_argument("--tta-epochs", type=int, default=20, help="epochs of exact's reference run (N of the target)")
    s.add_argument("--tta-run-epochs", type=int, default=8,
                   help="epochs of a setting's time-to-accuracy run: enough to reach the target, not to define it")
    c = sub.add_parser("capacity", help="the largest SBM each P trains within --memory per host, no CPU quota")
    c.add_argument("--hosts", type=ints, default=[1, 2, 4, 8])
    c.add_argument("--memory", default="2G")
    c.add_argument("--start", type=int, default=250000, help="nodes per host of the first trial")
    t = sub.add_parser("table", help="the tables and plots from --results")
    t.add_argument("--png-dir", type=Path, default=ROOT / "docs")
    return ap


def main() -> None:
    """Parse, check for root, and run one command with the box's CPUs kept awake (unless --no-keep-awake)."""
    a = parser().parse_args()
    if a.cmd == "table":
        import cluster_report

        return cluster_report.report(Results(a.results).rows, a.png_dir)
    if os.geteuid() != 0:
        raise SystemExit("bench_cluster: needs root (it runs the network lab: namespaces, tc and cgroups)")
    if a.cmd == "sweep" and a.quick:
        a.graphs = ["sbm"]
    if a.cmd == "capacity":
        a.memory = netlab.parse_bytes(a.memory)
    a.work.mkdir(parents=True, exist_ok=True)
    res, lab = Results(a.results), Lab()
    # every run, pinned ones included, on vCPUs that never halt; the spinners die with this process
    spinners = keepawake.spin(die_with_parent=True) if a.keep_awake else []
    try:
        {"fidelity": fidelity, "sweep": sweep, "capacity": capacity}[a.cmd](a, res, lab)
    finally:
        lab.close()
        keepawake.unspin(spinners)


if __name__ == "__main__":
    main()
