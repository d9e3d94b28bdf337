"""The busiest rank on emulated hosts: the cost model's prediction beside the measured epoch, and the default
partition against `--balance nodes` and Mt-KaHyPar's volume objective (docs/benchmarks.md, "The cost model
on emulated hosts"). Needs root (scripts/netlab.py).

    python scripts/bench_busiest.py run [--hosts 4x0.45,2x0.45,8x0.22,4x0.22,2x0.22] [--rates 1gbit,none]
                                        [--graphs rmat,sbm,grid] [--compare 4x0.45,8x0.22] [--repeat 3]
    python scripts/bench_busiest.py table [--repredict [--profiles DIR ...] [--zero FIELD]]
    python scripts/bench_busiest.py reprofile --hosts ... --rates ... [--into DIR]
    python scripts/bench_busiest.py spread --profiles DIR --profiles DIR ...
    python scripts/bench_busiest.py --results FILE try --lab 4x0.45 --rate 1gbit --graph rmat \
        --partition DIR=default --partition DIR=nodes

Per lab (P hosts of C cores, links at a rate) `run` measures the machine profile where the ranks train
(`netlab.py profile`: `gnn-dist profile-machine --link` inside the hosts), partitions each graph with the
default, priced by that profile for GCN 3 layers hidden 128 (`partition --machine --hidden 128 --layers 3`),
and trains it with that profile, so the first logged epoch carries the model's prediction. Where --compare
names the lab, at the first rate, `--balance nodes` and `--method mtkahypar --objective vol --balance nodes`
train too. Partitions are made outside the hosts, once. Each run appends a row to --results; a rerun skips
rows already there, and the repeats are outermost, so a cut-short run still has whole repeats.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import bench_cluster as bc  # noqa: E402
import keepawake  # noqa: E402
import netlab  # noqa: E402

GRAPHS = {"rmat": "rmat:scale=18,edges=4000000,features=128",
          "sbm": "sbm:nodes=200000,avg_degree=16,features=128",
          "grid": "grid:width=500,height=500,features=128"}
OTHERS = {"nodes": ["--balance", "nodes"],
          "mtkahypar-vol": ["--method", "mtkahypar", "--objective", "vol", "--balance", "nodes"]}


def hosts_list(text: str) -> list[tuple[int, float]]:
    """--hosts/--compare: PxC, comma-separated (4x0.45: four hosts of 0.45 core)."""
    try:
        out = [(int(p), float(c)) for p, c in (x.split("x") for x in text.split(",") if x)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected PxC,... (e.g. 4x0.45,8x0.22), got {text!r}") from None
    if not out or min(p for p, _ in out) < 2:
        raise argparse.ArgumentTypeError(f"at least 2 hosts a lab (the profile times links between them), got {text!r}")
    return out


def partition(spec: str, p: int, out: Path, flags: list[str]) -> Path:
    """`gnn-dist partition` into `out` (once), priced for the model trained here."""
    if not (out / "partition.json").exists():
        t = time.perf_counter()
        r = subprocess.run([*bc.GNN, "partition", "--dataset", spec, "--parts", str(p), "--out", str(out), "--hidden",
                            "128", "--layers", "3", "--progress", "none", "--force", *flags], cwd=ROOT,
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"bench_busiest: partitioning {spec} into {p} ({' '.join(flags)}) failed: "
                             f"{(r.stderr.strip().splitlines() or ['exit ' + str(r.returncode)])[-1]}")
        print(f"[busiest] partitioned {out.name} ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    return out


def part_dir(work: Path, spec: str, p: int, cores: float, rate: str, variant: str) -> Path:
    """Where a row's partition lives: the default's is priced for its lab, the others are the same on every lab."""
    name = f"{spec.split(':')[0]}-{zlib.crc32(spec.encode()):08x}-"
    return work / (name + (f"default-{p}x{cores:g}-{rate}" if variant == "default" else f"{p}-{variant}"))


def try_partition(a: argparse.Namespace) -> None:
    """Train partition folders already made (a default priced by a profile measured again, a candidate the
    model passed over, node counts again beside it) on one lab, the repeats outermost so that the partitions
    take turns (this box drifts over minutes), each as rows of its label; the folder is kept in the row for
    `table --repredict`. The lab's profile is measured first where it is missing."""
    tries = []
    for spec in a.partition:
        folder, _, label = spec.rpartition("=")
        if not folder or not label or not (Path(folder) / "partition.json").exists():
            raise SystemExit(f"bench_busiest: --partition takes DIR=LABEL, DIR a partition folder; got {spec!r}")
        tries.append((Path(folder).resolve(), label))
    (p, cores), = a.lab
    res, lab = bc.Results(a.results), bc.Lab()
    try:
        lab.use(p, a.rate, cores)
        machine = profile(a.work, p, cores, a.rate)
        for rep in range(a.repeat):
            for folder, label in tries:
                key = {"kind": "busiest", "graph": GRAPHS[a.graph], "P": p, "cores": cores, "rate": a.rate,
                       "partition": label, "rep": rep, "folder": str(folder)}
                bc.lab_run(res, key, folder, a.work, a.epochs, 0, ["--machine", str(machine)], a.rate)
    finally:
        lab.close()


def profile_path(work: Path, p: int, cores: float, rate: str) -> Path:
    return work / f"machine-{p}x{cores:g}-{rate}.json"


def profile(work: Path, p: int, cores: float, rate: str, again: bool = False) -> Path:
    """The machine profile of the lab now up, measured once inside its hosts (`again`: measured anew)."""
    out = profile_path(work, p, cores, rate)
    if again or not out.exists():
        t, part = time.perf_counter(), out.with_name(out.stem + ".part.json")  # netlab writes it twice: a kill leaves no half
        if netlab.profile(str(part), name=f"lab {p}x{cores:g} cores, {rate}") != 0:
            raise SystemExit(f"bench_busiest: profiling {p} hosts of {cores:g} core at {rate} failed")
        part.rename(out)
        print(f"[busiest] profiled {out.name} ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    return out


def run(a: argparse.Namespace) -> None:
    res, lab, t0 = bc.Results(a.results), bc.Lab(), time.perf_counter()
    a.work.mkdir(parents=True, exist_ok=True)
    try:
        for rep in range(a.repeat):
            for p, cores in a.hosts:
                for rate in a.rates:
                    variants = ["default"] + (list(OTHERS) if (p, cores) in a.compare and rate == a.rates[0] else [])
                    keys = [({"kind": "busiest", "graph": GRAPHS[g], "P": p, "cores": cores, "rate": rate,
                              "partition": v, "rep": rep}, g, v) for g in a.graphs for v in variants]
                    todo = [(k, g, v) for k, g, v in keys if not res.done(**k)]
                    if not todo:
                        continue
                    lab.use(p, rate, cores)
                    machine = profile(a.work, p, cores, rate)
                    for key, g, v in todo:
                        flags = ["--machine", str(machine)] if v == "default" else OTHERS[v]
                        part = partition(GRAPHS[g], p, part_dir(a.work, GRAPHS[g], p, cores, rate, v), flags)
                        bc.lab_run(res, key, part, a.work, a.epochs, 0, ["--machine", str(machine)], rate)
    finally:
        lab.close()
    print(f"[busiest] done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def reprofile(a: argparse.Namespace) -> None:
    """Measure each lab's profile anew (a profile taken before the model learnt a field; `table --repredict`
    then prices the rows already measured with it), into `--into` where given, keeping the profiles the rows
    ran with (`table --repredict --profiles DIR` prices with the new set)."""
    into = a.into or a.work
    into.mkdir(parents=True, exist_ok=True)
    lab = bc.Lab()
    try:
        for p, cores in a.hosts:
            for rate in a.rates:
                lab.use(p, rate, cores)
                profile(into, p, cores, rate, again=True)
    finally:
        lab.close()


def repredict(row: dict, work: Path, widths: bool = True, profiles: Sequence[Path] = (),
              zero: Sequence[str] = ()) -> float:
    """The current cost model's epoch for a measured row: its partition, its lab's profile (as now on disk, in
    `profiles` where given, the median of its profiles there where several; the optional fields in `zero` as
    not measured, to see what one of them moves);
    `widths=False`: every layer at the profile's mean rates, as the model priced them before the wide rates
    (and before the in-cache ones)."""
    import dataclasses

    from partition.costmodel import Workload, predict
    from partition.machine import load, median_profile
    from partition.part_counts import parts_from_meta
    from partition.store import read_meta

    folder = row.get("folder") or part_dir(work, row["graph"], row["P"], row["cores"], row["rate"], row["partition"])
    meta = read_meta(str(folder))
    found = [load(str(profile_path(d, row["P"], row["cores"], row["rate"]))) for d in profiles or [work]]
    machine = found[0] if len(found) == 1 else median_profile(found, f"lab {row['P']}x{row['cores']:g} {row['rate']}")
    machine = dataclasses.replace(machine, **dict.fromkeys(zero, 0.0))
    if not widths:
        machine = dataclasses.replace(machine, sparse_wide_per_core=0.0, dense_wide_per_core=0.0,
                                      sparse_hot_wide_per_core=0.0,
                                      dense_cached_per_core=0.0, elementwise_cached_per_core=0.0)
    work_ = Workload(meta["num_features"], meta["num_classes"], 128, 3)
    return predict(with_halo_edges(parts_from_meta(meta), Path(folder), meta), work_, machine).epoch_s


def with_halo_edges(parts: list[dict], folder: Path, meta: dict | None = None) -> list[dict]:
    """Parts of a partition made before partition.json kept `halo_edges`, with the count taken from the part
    files (read and checked as training reads them), so that every row is priced by the same model."""
    from partition.part_counts import plan_halo_edges
    from partition.store import read_part

    def count(k: int) -> int:
        if (folder, k) not in _HALO_EDGES:  # each row of a partition prices it again: read its parts once
            plan = read_part(folder, k, meta)
            _HALO_EDGES[folder, k] = plan_halo_edges(plan.indices, plan.num_inner)
        return _HALO_EDGES[folder, k]

    return [p if p.get("halo_edges") is not None else dict(p, halo_edges=count(k)) for k, p in enumerate(parts)]


_HALO_EDGES: dict[tuple[Path, int], int] = {}


def priced_rows(a: argparse.Namespace) -> list[dict]:
    """The results' rows, each priced again with the current model where `--repredict` asks (with the medians
    of the `--profiles` sets, and each set alone where there are several); the flags checked first."""
    rows = [r for r in bc.Results(a.results).rows if r.get("kind") == "busiest"]
    zero = getattr(a, "zero", None) or []
    if (a.profiles or zero) and not a.repredict:
        raise SystemExit("bench_busiest: --profiles and --zero price the rows again: give --repredict too")
    for d in a.profiles or ():
        if not d.is_dir():
            raise SystemExit(f"bench_busiest: --profiles {d}: not a folder")
    sys.path.insert(0, str(ROOT))
    from partition.machine import OPTIONAL

    if bad := [f for f in zero if f not in OPTIONAL]:
        raise SystemExit(f"bench_busiest: --zero {bad[0]}: not an optional profile field ({', '.join(OPTIONAL)})")
    if not a.repredict:
        return rows
    from partition.errors import GnnDistError

    try:
        return [dict(r, predicted_s=repredict(r, a.work, profiles=a.profiles, zero=zero),
                     before_s=repredict(r, a.work, widths=False, profiles=a.profiles, zero=zero),
                     per_set=[repredict(r, a.work, profiles=[d], zero=zero) for d in a.profiles]
                     if len(a.profiles or ()) > 1 else None) for r in rows]
    except GnnDistError as e:  # a row's partition folder or profile gone or edited
        raise SystemExit(f"bench_busiest: cannot price a row again: {e}") from None


def table(a: argparse.Namespace) -> None:
    """The validation table (default partitions: predicted beside measured) and the comparison table."""
    rows = priced_rows(a)
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["graph"], r["P"], r["cores"], r["rate"], r["partition"]), []).append(r)
    med = {k: summary(v) for k, v in groups.items()}
    before = " without the wide rates / measured |" if a.repredict else ""
    sets = len(a.profiles or ()) > 1
    each = " each set alone / measured |" if sets else ""
    print("| graph | hosts | link | runs | epoch s | range | predicted s | predicted / measured |" + before + each +
          " busiest compute / mean |")
    print("|---|---|---|---|---|---|---|---|---|" + "---|" * (bool(before) + sets))
    near, near_before, near_every, near_any = [], [], [], []
    for (g, p, c, rate, v), m in sorted(med.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1], kv[0][3])):
        if v != "default":
            continue
        near.append(abs(m["predicted"] / m["epoch"] - 1) <= 0.2)
        b = ""
        if before:
            near_before.append(abs(m["before"] / m["epoch"] - 1) <= 0.2)
            b = f" {m['before'] / m['epoch']:.2f} |"
        if sets:  # what each set of profiles alone predicts: the row's spread from measuring its host again
            alone = each_set(groups[g, p, c, rate, v], m["epoch"])
            near_every.append(all(abs(x - 1) <= 0.2 for x in alone))
            near_any.append(any(abs(x - 1) <= 0.2 for x in alone))
            b += f" {min(alone):.2f}-{max(alone):.2f} |"
        print(f"| `{g.split(':')[0]}` | {p} x {c:g} core | {rate} | {m['runs']} | {m['epoch']:.3f} | {m['range']} | "
              f"{m['predicted']:.3f} | {m['predicted'] / m['epoch']:.2f} |{b} {m['skew']:.2f} |")
    print(f"\nwithin 20%: {sum(near)} of {len(near)}"
          + (f" (without the wide rates: {sum(near_before)})" if before else "")
          + (f"; with each set of profiles alone, within 20% by every set: {sum(near_every)}, by at least one: "
             f"{sum(near_any)}" if sets else "") + "\n")
    print("| graph | hosts | link | partition | runs | epoch s | range | x --balance nodes | busiest compute / mean |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (g, p, c, rate, v), m in sorted(med.items()):
        nodes = med.get((g, p, c, rate, "nodes"))
        if nodes is None:
            continue
        print(f"| `{g.split(':')[0]}` | {p} x {c:g} core | {rate} | {v} | {m['runs']} | {m['epoch']:.3f} | {m['range']} | "
              f"{m['epoch'] / nodes['epoch']:.2f} | {m['skew']:.2f} |")


def each_set(runs: list[dict], epoch: float) -> list[float]:
    """A row's predicted / measured with each set of profiles alone (`per_set`: one price a run and a set)."""
    return [statistics.median(r["per_set"][i] for r in runs) / epoch for i in range(len(runs[0]["per_set"]))]


# what the labs' profiles configure rather than measure: left out of `spread`
CONFIGURED = ("cores_per_host", "ranks_per_host", "link_rate_bytes_per_s", "cache_bytes", "epoch_fixed_ranks",
              "link_burst_bytes")


def spread(a: argparse.Namespace) -> None:
    """Per rate, how far sets of the labs' profiles measured at different times disagree: over the labs found
    in every folder, the range of each lab's largest value of the field over its least (a field 0 in a set,
    not measured there, is left out). The model's goal is 20%: a rate that moves more between two
    measurements of one host decides rows by itself."""
    sys.path.insert(0, str(ROOT))
    from partition.errors import GnnDistError
    from partition.machine import UNMEASURED_ZERO, load, median_profile

    if len(a.profiles) < 2:
        raise SystemExit("bench_busiest: spread compares sets of profiles: give --profiles at least twice")
    for d in a.profiles:
        if not d.is_dir():
            raise SystemExit(f"bench_busiest: --profiles {d}: not a folder")
    labs = sorted(set.intersection(*({f.name for f in d.glob("machine-*.json")} for d in a.profiles)))
    if not labs:
        raise SystemExit(f"bench_busiest: no machine-PxC-RATE.json is in every one of {[str(d) for d in a.profiles]}")
    try:
        sets = {lab: [load(str(d / lab)) for d in a.profiles] for lab in labs}
        for lab, found in sets.items():
            median_profile(found, lab)  # one lab's profiles: of one kind of host
    except GnnDistError as e:
        raise SystemExit(f"bench_busiest: spread: {e}") from None
    print(f"{len(labs)} labs, {len(a.profiles)} sets: each lab's max / min of the field, the range over the labs\n")
    print("| field | labs | max / min: least | median | most |\n|---|---|---|---|---|")
    for field in [f for f in vars(sets[labs[0]][0]) if f not in CONFIGURED and f != "name"]:
        ratios = []
        for found in sets.values():
            values = [getattr(m, field) for m in found if getattr(m, field) or field not in UNMEASURED_ZERO]
            if len(values) > 1 and min(values) > 0:
                ratios.append(max(values) / min(values))
        if ratios:
            print(f"| `{field}` | {len(ratios)} | {min(ratios):.2f} | {statistics.median(ratios):.2f} | {max(ratios):.2f} |")


def summary(rows: list[dict]) -> dict:
    """Medians over a row's runs: the epoch, the prediction, and the busiest rank's compute over the mean rank's."""
    epochs, predicted = [r["epoch_s"] for r in rows], [r["predicted_s"] for r in rows if r["predicted_s"]]
    skews = [max(r["rank_compute_s"]) / statistics.mean(r["rank_compute_s"]) for r in rows]
    return {"runs": len(rows), "epoch": statistics.median(epochs), "skew": statistics.median(skews),
            "range": f"{min(epochs):.3f}-{max(epochs):.3f}" if len(rows) > 1 else "-",
            "predicted": statistics.median(predicted) if predicted else float("nan"),
            "before": statistics.median([r["before_s"] for r in rows if r.get("before_s")] or [float("nan")])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=ROOT / "out" / "busiest" / "results.jsonl")
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "busiest", help="partitions, profiles and logs")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="measure (root: the lab)")
    r.add_argument("--hosts", type=hosts_list, default=hosts_list("4x0.45,2x0.45,8x0.22,4x0.22,2x0.22"),
                   help="labs to measure, PxC comma-separated (P hosts of C cores)")
    r.add_argument("--rates", type=lambda x: x.split(","), default=["1gbit", "none"],
                   help="link rates (none: unshaped); the first is the comparison's")
    r.add_argument("--graphs", type=lambda x: x.split(","), default=list(GRAPHS), help=", ".join(GRAPHS))
    r.add_argument("--compare", type=hosts_list, default=hosts_list("4x0.45,8x0.22"),
                   help="labs where --balance nodes and Mt-KaHyPar vol train beside the default")
    r.add_argument("--repeat", type=int, default=3)
    r.add_argument("--epochs", type=int, default=4, help="epochs a run (the first is warm-up)")
    t = sub.add_parser("table", help="the markdown tables, medians over repeats")
    t.add_argument("--repredict", action="store_true",
                   help="price each row with the current cost model (its partition and its lab's profile in --work)")
    t.add_argument("--profiles", type=Path, action="append", default=None,
                   help="with --repredict: the labs' profiles from this folder instead (a set measured again); "
                        "repeated: each field the median over the folders (give --work itself to count the rows' own)")
    t.add_argument("--zero", action="append", default=[], metavar="FIELD",
                   help="with --repredict: price as if the profiles had not measured FIELD (repeat the flag)")
    rp = sub.add_parser("reprofile", help="measure the labs' profiles anew (root)")
    rp.add_argument("--hosts", type=hosts_list, required=True)
    rp.add_argument("--rates", type=lambda x: x.split(","), required=True)
    rp.add_argument("--into", type=Path, default=None, help="write the profiles here (default: --work, replacing)")
    sp = sub.add_parser("spread", help="how far sets of the labs' profiles measured at different times disagree")
    sp.add_argument("--profiles", type=Path, action="append", required=True, help="a folder of profiles (twice or more)")
    tr = sub.add_parser("try", help="train partition folders already made on one lab, taking turns (root)")
    tr.add_argument("--lab", type=hosts_list, required=True, help="PxC: one lab")
    tr.add_argument("--rate", required=True, help="its links' rate (none: unshaped)")
    tr.add_argument("--graph", required=True, choices=list(GRAPHS), help="the graph the folder holds")
    tr.add_argument("--partition", action="append", required=True, metavar="DIR=LABEL",
                    help="a partition folder and its rows' name (repeat the flag); give --results a file of its "
                         "own, so that the labels default and nodes do not mix with run's rows")
    tr.add_argument("--repeat", type=int, default=3)
    tr.add_argument("--epochs", type=int, default=4, help="epochs a run (the first is warm-up)")
    a = ap.parse_args()
    a.results, a.work = a.results.resolve(), a.work.resolve()  # partitions run from the repository root
    if a.cmd == "table":
        return table(a)
    if a.cmd == "spread":
        return spread(a)
    if a.cmd == "run" and set(a.graphs) - set(GRAPHS):
        ap.error(f"--graphs: choose from {', '.join(GRAPHS)}")
    if a.cmd == "try" and len(a.lab) != 1:
        ap.error("try: one --lab")
    if os.geteuid() != 0:
        raise SystemExit("bench_busiest: needs root (it runs the network lab: namespaces, tc and cgroups)")
    spinners = keepawake.spin(die_with_parent=True)  # hosts below a core: vCPUs that never halt (bench_cluster.py)
    try:
        {"run": run, "reprofile": reprofile, "try": try_partition}[a.cmd](a)
    finally:
        keepawake.unspin(spinners)


if __name__ == "__main__":
    main()
