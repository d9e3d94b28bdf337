"""The tables and plots of scripts/bench_cluster.py, from its results file (docs/benchmarks.md, "A cluster in a box").

Every row of a table is the median of the runs that measured it (each run's own figure is the median of its
epochs after the first); the range beside it is the runs' spread. A row's bound is the busiest rank's
compute plus the wire its overlap did not hide: per epoch, the largest over ranks of compute + max(0, max(bytes
out, bytes in) / link rate - seconds of work while its rows travelled). It counts a rank's bytes as one
transfer at the configured rate. It is the epoch this run's own compute and bytes allow, not a floor for the
method: compute is each rank's logged time outside its waits, so slowdowns inside compute (a send's CPU taken
from the same quota) are in the bound too, and x bound near 1 says only that the wire, not compute, is
explained. The 200 Mbit/s rows, where the wire is most of the epoch, are the test of it.
"""
from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnn_dist.errors import MissingExtraError  # noqa: E402
from gnn_dist.train import tta  # noqa: E402


def med(rows: list[dict], field: str) -> float | None:
    vals = [r[field] for r in rows if r.get(field) is not None]
    return statistics.median(vals) if vals else None


def spread(rows: list[dict]) -> str:
    vals = sorted(r["epoch_s"] for r in rows)
    return f"{vals[0]:.2f}-{vals[-1]:.2f}" if len(vals) > 1 else "-"


def peak_mib(rows: list[dict]) -> str:
    """The hosts' peak memory, least and most (page cache included), over the runs of a row."""
    peaks = [x for r in rows for x in r.get("peak_bytes") or [] if x]
    return f"{min(peaks) / 2**20:.0f}-{max(peaks) / 2**20:.0f}" if peaks else "-"


def fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def fidelity_table(rows: list[dict]) -> None:
    """Per config, the median over rounds of its epoch against the mean of the pinned runs either side of it
    (x C): the box's drift cancels; the thread rows also against the round's --threads 1 row."""
    for dataset, period in dict.fromkeys((r["dataset"], r.get("period")) for r in rows):
        mine = [r for r in rows if (r["dataset"], r.get("period")) == (dataset, period)]
        seq = {(r["rep"], r.get("seq")): r for r in mine}
        ratio = {}
        for r in mine:
            near = [seq[(r["rep"], r["seq"] + d)]["epoch_s"] for d in (-1, 1)
                    if seq.get((r["rep"], r.get("seq", -9) + d), {}).get("config") == "pinned"]
            if r["cores"] and near:
                ratio[(r["rep"], r["config"])] = r["epoch_s"] * r["cores"] / statistics.mean(near)
        pinned = [r for r in mine if r["config"] == "pinned"]
        print(f"\nFidelity: {dataset}, GCN 3 layers hidden 128, one rank; CFS period "
              f"{'netlab default' if period is None else f'{period} us'}; medians over {len({r['rep'] for r in mine})} "
              f"rounds, each config between two runs pinned to one CPU (range of those: {spread(pinned)} s)")
        print("| rank | threads | epoch s | range | x (pinned / C) | x --threads 1 | cores delivered |\n"
              "|---|---|---|---|---|---|---|")
        for config in dict.fromkeys(r["config"] for r in mine):
            rs = [r for r in mine if r["config"] == config]
            x = [v for (rep, c), v in ratio.items() if c == config]
            vs1 = [v / ratio[(rep, "C=0.45 --threads 1")] for (rep, c), v in ratio.items()
                   if c == config and c.startswith("C=0.45") and (rep, "C=0.45 --threads 1") in ratio]
            label = "pinned to one CPU, no quota" if config == "pinned" else config
            print(f"| {label} | {rs[0]['threads'][0]} | {fmt(med(rs, 'epoch_s'))} | {spread(rs)} | "
                  f"{fmt(statistics.median(x) if x else None, 2)} | {fmt(statistics.median(vs1) if vs1 else None, 2)} | "
                  f"{fmt(med(rs, 'delivered'), 3)} |")


def sweep_table(rows: list[dict], refs: list[dict]) -> dict:
    """One markdown table per graph; returns {graph: {(setting, rate): {P: speedup}}} for the plot."""
    curves: dict = {}
    for graph in dict.fromkeys(r["graph"] for r in rows):
        mine = [r for r in rows if r["graph"] == graph]
        ref = next((r for r in refs if r["graph"] == graph), None)
        target = tta.default_target(ref["records"]) if ref else None
        ref_epochs = tta.time_to_target(ref["records"], target).epochs if ref else None
        groups = defaultdict(list)
        for r in mine:
            groups[(r["P"], r["rate"], r["setting"])].append(r)
        one = groups.get((1, "none", "exact"))
        base = med(one, "epoch_s") if one else None
        base_tta = ref_epochs * base if ref_epochs and base else None
        cores = mine[0]["cores"]
        print(f"\n{graph}, GCN 3 layers hidden 128, hosts at {cores:g} core each; target test accuracy "
              f"{fmt(target, 4)} (exact's after {ref['epochs'] if ref else '?'} epochs, less 0.3 points), exact reaches "
              f"it in {ref_epochs} epochs")
        print("| hosts | link | setting | epoch s | range | speedup | efficiency | bound s | x bound | predicted s | "
              "epochs to target | time to target s | x one host | peak MiB per host |\n" + "|---" * 14 + "|")
        for (p, rate, setting), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] != "none", kv[0][1],
                                                                           list(("exact", "adaptive", "auto")).index(kv[0][2]))):
            e = med(rs, "epoch_s")
            speed = base / e if base else None
            run = next((r for r in rs if r.get("tta")), None)
            epochs = ref_epochs if setting == "exact" else (
                tta.time_to_target(run["records"], target).epochs if run and target is not None else None)
            t = epochs * e if epochs else None
            reach = epochs or (f"> {len(run['records'])}" if run and target is not None else "-")  # not in its N
            curves.setdefault(graph, {}).setdefault((setting, rate if p > 1 else None), {})[p] = speed
            print(f"| {p} | {rate if p > 1 else '-'} | {setting} | {fmt(e)} | {spread(rs)} | {fmt(speed, 2)} | "
                  f"{fmt(speed / p if speed else None, 2)} | {fmt(med(rs, 'bound_s'))} | "
                  f"{fmt(e / med(rs, 'bound_s'), 2)} | {fmt(med(rs, 'predicted_s'))} | "
                  f"{reach} | {fmt(t, 1)} | "
                  f"{fmt(t / base_tta if t and base_tta else None, 2)} | {peak_mib(rs)} |")
        wall = sum(r.get("wall_s") or 0 for r in mine)
        print(f"\nits runs took {wall / 3600:.2f} h ({len(mine)} runs; partitioning and the lab's set-up not counted)")
    return curves


def capacity_table(rows: list[dict]) -> dict:
    """Per P the largest SBM that trained and the smallest that did not; returns {P: largest}."""
    best: dict = {}
    print("\nCapacity: SBM (avg degree 16, 128 features, 16 classes), GCN 3 layers hidden 128, 3 epochs; "
          f"{rows[0]['memory'] / 2**30:g} GiB per host, no CPU quota")
    print("| hosts | largest that trains (nodes) | smallest that does not | x one host | peak MiB per host "
          "(page cache included) |\n|---|---|---|---|---|")
    for p in sorted({r["P"] for r in rows}):
        mine = [r for r in rows if r["P"] == p]
        good = max((r for r in mine if r["ok"]), key=lambda r: r["nodes"], default=None)
        bad = min((r["nodes"] for r in mine if not r["ok"]), default=None)
        best[p] = good["nodes"] if good else 0
        peaks = "/".join(f"{x / 2**20:.0f}" for x in good["peak_bytes"]) if good else "-"
        ratio = best[p] / best[min(best)] if best.get(min(best)) else None
        print(f"| {p} | {best[p]:,} | {f'{bad:,}' if bad else '-'} | {fmt(ratio, 2)} | {peaks} |")
    return best


def plots(curves: dict, best: dict, out: Path, memory: int) -> None:
    from gnn_dist.cli.plots import _pyplot, _save

    plt = _pyplot()
    if curves:
        fig, axes = plt.subplots(1, len(curves), figsize=(5.2 * len(curves), 4.2), squeeze=False)
        for ax, (graph, lines) in zip(axes[0], curves.items()):
            one = lines.get(("exact", None), {}).get(1, 1.0)
            hosts = sorted({p for pts in lines.values() for p in pts})
            ax.plot(hosts, hosts, "k--", lw=0.8, label="linear")
            for (setting, rate), pts in lines.items():
                if rate is None:
                    continue
                xs = [1] + sorted(pts)
                ax.plot(xs, [one] + [pts[p] for p in sorted(pts)], marker="o", label=f"{setting}, {rate}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log", base=2)
            ax.set_xlabel("emulated hosts")
            ax.set_ylabel("speedup over one host")
            ax.set_title(graph.split(",")[0], fontsize=9)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        print(f"plot: {_save(fig, out / 'bench_cluster_speedup.png')}")
    if best:
        fig, ax = plt.subplots(figsize=(5.5, 4.2))
        ps = sorted(best)
        ax.plot(ps, [best[p] / 1e6 for p in ps], marker="o", label="largest SBM that trains")
        ax.plot(ps, [best[ps[0]] * p / ps[0] / 1e6 for p in ps], "k--", lw=0.8, label="linear")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"emulated hosts ({memory / 2**30:g} GiB each)")
        ax.set_ylabel("nodes, millions")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        print(f"plot: {_save(fig, out / 'bench_cluster_capacity.png')}")


def report(rows: list[dict], png_dir: Path) -> None:
    """Every table from the results' rows, then the plots into `png_dir` (made if missing)."""
    if png_dir.exists() and not png_dir.is_dir():
        raise SystemExit(f"bench_cluster: --png-dir {png_dir} is a file, not a folder")
    png_dir.mkdir(parents=True, exist_ok=True)
    kinds = defaultdict(list)
    for r in rows:
        kinds[r["kind"]].append(r)
    if not rows:
        raise SystemExit("bench_cluster: the results file holds no runs yet")
    if kinds["fidelity"]:
        fidelity_table(kinds["fidelity"])
    curves = sweep_table(kinds["sweep"], kinds["reference"]) if kinds["sweep"] else {}
    best = capacity_table(kinds["capacity"]) if kinds["capacity"] else {}
    try:
        plots(curves, best, png_dir, kinds["capacity"][0]["memory"] if kinds["capacity"] else 0)
    except MissingExtraError as e:
        print(f"bench_cluster: no plots: {e}", file=sys.stderr)
