"""`gnn-dist info DIR`: the partition's stats table, read back from disk and verified."""
from __future__ import annotations

import argparse

from partition.errors import DataError, UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="show a partition directory's stats",
                       description="Print the stats table of a partition directory after checking its checksums.")
    p.add_argument("path", nargs="?", help="partition directory")
    p.add_argument("--run", dest="run_log", default=None, metavar="LOG", help="summarise a training log (--log JSONL) instead")
    p.add_argument("--no-verify", action="store_true", help="skip the sha256 check of every file")
    p.add_argument("--export-split", default=None, metavar="FILE",
                   help="also write the stored train/val/test split as an .npz of boolean masks over every node in "
                        "global ids (train_mask, val_mask, test_mask; typed graphs: the target type's nodes), plus "
                        "original_ids where edges: compacted sparse ids, and held-out link-prediction pairs")
    p.add_argument("--plot", default=None, metavar="PNG",
                   help="also write a PNG: part sizes and halo volumes (a partition), or loss and accuracy curves (--run)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.run_log:
        print(summarise_run(args.run_log))
        if args.plot:
            import json
            from pathlib import Path

            from gnn_dist.cli.plots import plot_run

            records = [r for r in (json.loads(x) for x in Path(args.run_log).read_text().splitlines() if x.strip())
                       if "loss" in r]
            print(f"plot: {plot_run(records, args.plot)}")
        return 0
    if not args.path:
        raise UsageError("give a partition directory or --run LOG")
    from partition import format_stats
    from partition.store import read_meta, verify_partition

    meta = read_meta(args.path) if args.no_verify else verify_partition(args.path)
    print(f"{args.path}: {meta.get('graph')} ({meta['num_nodes']} nodes, {meta.get('num_edges')} edges), "
          f"{meta['num_parts']} parts by {meta.get('method')}, format v{meta['format_version']}"
          + ("" if args.no_verify else ", checksums ok"))
    if "stats" in meta:
        print(format_stats(meta["stats"], meta["parts"]))
    if args.export_split:
        print(export_split(args.path, meta, args.export_split, verify=not args.no_verify))
    if args.plot:
        from gnn_dist.cli.plots import plot_partition

        print(f"plot: {plot_partition(meta, args.plot)}")
    if meta.get("format_version") == 2:
        print("node types: " + ", ".join(f"{t} {n} x {w}" for t, n, w in zip(meta["node_types"], meta["node_counts"],
                                                                          meta["feature_dims"]))
              + f"; target {meta['target_type']}; relations: {', '.join(meta['edge_types'])}")
        for k, row in enumerate(meta["type_counts"]):
            print(f"  part {k}: " + " / ".join(f"{t} {c}" for t, c in zip(meta["node_types"], row)))
        ra = meta["relagg"]
        print(f"relation aggregates first: {ra['relations_aggregated']} of {ra['pair_relations']} triples, "
              f"{ra['relagg_rows']} rows per layer instead of {ra['raw_rows']}")
    if "churn_summary" in meta:
        c = meta["churn_summary"]
        print(f"{meta['num_snapshots']} snapshots ({meta['num_train_snapshots']} train), {meta['task']}; halo "
              f"{c['halo_rows_mean']:.0f} rows per snapshot (union {c['halo_rows_union']}); per step "
              f"+{c['halo_added_per_step']:.1f} / -{c['halo_removed_per_step']:.1f} halo rows, "
              f"+{c['edges_added_per_step']:.1f} / -{c['edges_removed_per_step']:.1f} edges")
        for k, row in enumerate(meta["parts"]):
            print(f"  part {k}: {row['inner']} inner nodes, union halo {row['halo']}")
    return 0


def export_split(path: str, meta: dict, out: str, verify: bool = True) -> str:
    """Write the partition's split, in global ids, as an .npz a PyG user loads with `np.load` (written
    through a temporary file and renamed); returns the line that says what was written."""
    from pathlib import Path

    import numpy as np

    from partition.book import PartitionBook
    from partition.store import LINK_FILE, read_root_file, write_atomic

    book = PartitionBook(path, meta, verify)
    arrays: dict = book.split()
    what = f"{arrays['train_mask'].shape[0]} nodes"
    if meta.get("format_version") == 2:
        arrays["target_type"] = np.array(meta["target_type"])
        what = f"{what} of target type {meta['target_type']}"
    if book.original_ids is not None:
        arrays["original_ids"] = np.asarray(book.original_ids, np.int64)
    if LINK_FILE in meta["sha256"]:
        arrays.update({f"link_{k}": v for k, v in read_root_file(path, LINK_FILE, meta, verify).items()})
    try:
        write_atomic(Path(out), lambda f: np.savez(f, **arrays))
    except OSError as e:
        raise UsageError(f"cannot write the split to {out}: {e.strerror or e}") from None
    counts = ", ".join(f"{k.split('_')[0]} {int(arrays[k].sum())}" for k in ("train_mask", "val_mask", "test_mask"))
    return f"split ({counts} of {what}) written to {out}"


def summarise_run(path: str) -> str:
    """Per-channel means over a training log: bytes per peer, time waited, staleness, bits, quantisation variance."""
    from pathlib import Path

    f = Path(path)
    if not f.is_file():
        raise DataError(f"training log {f} does not exist")
    records, cut = read_log(f)
    errors = [r["error"] for r in records if "error" in r]
    predictions = [r["prediction"] for r in records if "prediction" in r]
    records = [r for r in records if "epoch_time" in r]
    if not records:
        raise DataError(f"training log {f} has no epochs" + (f" (it ended with: {errors[-1]})" if errors else ""))
    n = len(records)
    last = records[-1]
    lines = [f"{f}: {n} epochs, mean epoch {sum(r['epoch_time'] for r in records) / n:.4f} s, "
             f"final loss {last['loss']:.4f}"
             + "".join(f", {k} {last[k]:.4f}" for k in ("train_acc", "val_acc", "test_acc") if k in last)]
    if errors:
        lines.append(f"the run failed: {errors[-1]}")
    if cut:
        lines.append("(its last line was cut off, the run stopped while writing it: left out)")
    from gnn_dist.cli.cost_report import measured_against_predicted

    lines += measured_against_predicted(records, predictions[-1] if predictions else None)
    channels: dict = {}
    for r in records:
        for name, c in r.get("halo", {}).items():
            agg = channels.setdefault(name, {"bytes": None, "wait_s": 0.0, "qvar": 0.0, "n": 0, "staleness": 0, "bits": None})
            b = c.get("bytes") or []
            if b:  # a channel absent from an epoch sent nothing then
                agg["bytes"] = b if agg["bytes"] is None else [x + y for x, y in zip(agg["bytes"], b)]
            agg["wait_s"] += c.get("wait_s", 0.0)
            agg["qvar"] += c.get("qvar", 0.0)
            agg["n"] += 1
            agg["staleness"] = c.get("staleness", 0)
            agg["bits"] = c.get("bits", agg["bits"])
    if channels:
        lines.append(f"{'channel':<10} {'KB/epoch per peer (rank 0 sends)':<36} {'wait ms':>8} {'stale':>5} "
                     f"{'bits per peer':<16} {'quant var':>10}")
        for name in sorted(channels):
            a = channels[name]
            kb = "/".join(f"{x / n / 1e3:.1f}" for x in (a["bytes"] or []))  # over all epochs: one-offs amortised
            bits = "/".join(str(b) for b in a["bits"]) if a["bits"] else "-"
            lines.append(f"{name:<10} {kb:<36} {1e3 * a['wait_s'] / n:>8.2f} {a['staleness']:>5} {bits:<16} "
                         f"{a['qvar'] / a['n']:>10.3g}")
    return "\n".join(lines)


def _numbers(v: object, size: int | None = None) -> bool:
    """A list of finite numbers (of `size` entries where given): what a log's per-rank fields must be."""
    import math

    return (isinstance(v, list) and (size is None or len(v) == size)
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v))


def _bad_field(r: dict) -> str | None:
    """The first field of one log record that a summary would misread, or None."""
    loss = r.get("loss")  # NaN where a run diverged: a number still
    if "epoch_time" in r and not (_numbers([r.get("epoch_time")]) and isinstance(loss, (int, float))):
        return "an epoch's epoch_time or loss is missing or not a number"
    if not isinstance(r.get("halo", {}), dict) or not all(isinstance(c, dict) for c in r.get("halo", {}).values()):
        return "halo is not an object of channels"
    if "rank_compute_s" in r or "rank_wait_s" in r:
        if not _numbers(r.get("rank_compute_s")) or not _numbers(r.get("rank_wait_s"), len(r["rank_compute_s"])):
            return "rank_compute_s and rank_wait_s are not lists of numbers of one length"
    pred = r.get("prediction")
    if pred is not None and not (isinstance(pred, dict) and _numbers([pred.get("epoch_s")]) and pred["epoch_s"] > 0
                                 and _numbers(pred.get("rank_compute_s"))
                                 and _numbers(pred.get("rank_wire_s"), len(pred["rank_compute_s"]))
                                 and {"machine", "busiest", "bottleneck"} <= set(pred)):
        return "prediction lacks epoch_s, rank_compute_s, rank_wire_s, machine, busiest or bottleneck"
    return None


def read_log(f) -> tuple[list[dict], bool]:
    """A training log's records, each checked (one line naming the first bad one), and whether its last line
    was cut off mid-write (a run killed while logging), which is left out rather than refused."""
    import json

    try:
        text = f.read_bytes().decode()
    except UnicodeDecodeError:
        raise DataError(f"training log {f} is not text (JSON lines)") from None
    lines = [(k + 1, line) for k, line in enumerate(text.splitlines()) if line.strip()]
    cut = False
    records = []
    for number, line in lines:
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            if number == lines[-1][0] and not text.endswith("\n") and len(lines) > 1:
                cut = True
                continue
            raise DataError(f"training log {f} is not JSON lines: line {number}: {e}") from None
        problem = "not a JSON object" if not isinstance(r, dict) else _bad_field(r)
        if problem:
            raise DataError(f"training log {f}, line {number}: {problem}")
        records.append(r)
    return records, cut
