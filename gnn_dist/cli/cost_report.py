"""The cost model beside the commands: partition's choice and prediction, the prediction a training log
carries, and `info --run`'s table of predicted against measured seconds per rank."""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from partition.errors import UsageError


def add_machine_flag(p, what: str) -> None:
    """`--machine FILE`, the one definition `partition` and `train` share."""
    p.add_argument("--machine", default=None, metavar="FILE",
                   help=f"machine profile (`gnn-dist profile-machine`) for {what} (default: the profile shipped "
                        f"with gnn-dist, so the default partition is the same on every machine)")


def read_profile(path: str | None):
    """The profile in `path` (one line naming what is wrong with it), or the shipped default."""
    from partition import machine

    return machine.load(path)


def prediction(args: argparse.Namespace, ctx, meta: dict, classes: int) -> dict | None:
    """On rank 0 with --log, the cost model's prediction of this run's epoch, for the first logged epoch
    (`gnn-dist info --run` shows it beside the measured ones), where the model prices what runs: built-in
    GCN layers on a static graph, halo rows in a fixed codec, the input cache on; None elsewhere."""
    if not (args.log and ctx.is_main and args.model == "gcn" and "stats" in meta and meta.get("format_version") == 1
            and run_shape(args) is not None and not args.no_input_cache):
        return None
    from partition import costmodel
    from partition.part_counts import parts_from_meta

    profile = args.machine_profile
    work = costmodel.Workload(features=meta["num_features"], classes=classes, hidden=args.hidden,
                              layers=args.layers or 2, overlap=not args.no_overlap, codec=args.codec)
    pred = costmodel.predict(parts_from_meta(meta), work, profile)
    return costmodel.prediction_record(pred, profile, work)


def _mean(rows: Sequence[Sequence[float]]) -> list[float]:
    return [sum(col) / len(col) for col in zip(*rows)]


def measured_against_predicted(records: list[dict], prediction: dict | None, skip: int = 1) -> list[str]:
    """Per rank, the mean measured compute and wait (epochs after the first `skip`, which pays one-off
    costs, where there are more) beside the prediction's compute and unhidden wire, and the epoch's."""
    timed = [r for r in records if "rank_compute_s" in r]
    if not timed:
        return []
    if len(timed) > skip:
        timed = timed[skip:]
    compute, wait = _mean([r["rank_compute_s"] for r in timed]), _mean([r["rank_wait_s"] for r in timed])
    epoch = sum(r["epoch_time"] for r in timed) / len(timed)
    lines = [f"per rank, mean of {len(timed)} epochs"
             + (f" against the cost model (machine '{prediction['machine']}')" if prediction else "") + ":",
             f"{'rank':>4} {'compute s':>10} {'wait s':>10}" + (f" {'pred compute':>12} {'pred wire':>10}"
                                                               if prediction else "")]
    for k, (c, w) in enumerate(zip(compute, wait)):
        line = f"{k:>4} {c:>10.4f} {w:>10.4f}"
        if prediction and k < len(prediction["rank_compute_s"]):
            line += f" {prediction['rank_compute_s'][k]:>12.4f} {prediction['rank_wire_s'][k]:>10.4f}"
        lines.append(line)
    if prediction:
        fixed = prediction.get("fixed_s")  # the profile's fixed epoch: in the epoch, in no rank's compute or wire
        fixed = (f", of which the profile's fixed epoch {fixed:.4f} s" if isinstance(fixed, (int, float))
                 and not isinstance(fixed, bool) and fixed > 0 else "")
        lines.append(f"epoch: measured {epoch:.4f} s, predicted {prediction['epoch_s']:.4f} s{fixed} "
                     f"({prediction['epoch_s'] / max(epoch, 1e-9):.2f}x; busiest rank {prediction['busiest']}, bottleneck "
                     f"{prediction['bottleneck']})")
    return lines


def say_machine(args: argparse.Namespace, graph) -> None:
    """On stderr, the profile the cost model uses (plain graphs), or that --machine goes unused (typed, dynamic)."""
    from gnn_dist.cli.partition_cmd import log
    from partition.graph import Graph

    if not isinstance(graph, Graph):
        if args.machine:
            log("note: --machine is not used: the cost model prices plain graphs, not typed or dynamic ones")
        return
    profile = args.machine_profile
    if getattr(args, "verbose", True):
        log(f"cost model: {profile.describe()}" + (f" (from {args.machine})" if args.machine else
                                                    " (the shipped default profile)"))
    measured_among = profile.epoch_fixed_ranks if profile.epoch_fixed_s else 0
    if measured_among and measured_among != args.parts:  # the fixed epoch grows with the ranks sharing a host
        log(f"note: the profile's fixed epoch was measured among {measured_among} ranks, not {args.parts}: "
            f"predictions are for {measured_among} ranks' fixed cost (take it with mpiexec -n {args.parts})")


PRICED_MODELS = ("gcn", "sage", "gin", "gat")  # built-in models, priced with GCN's layer plan
SHAPE_FLAGS = ("model", "hidden", "layers", "codec")  # what a partition is priced for (partition.json's priced_for)


def priced_for(args: argparse.Namespace) -> dict | None:
    """The run shape `partition` priced the default partition for, as partition.json records it; None where no
    choice was priced (--balance nodes, methods without the cost model's choice)."""
    return {k: getattr(args, k) for k in SHAPE_FLAGS} if getattr(args, "cost_choice", None) else None


def run_shape(args: argparse.Namespace) -> dict | None:
    """This training run's shape in priced_for's terms; None where the cost model cannot price it (a user's
    model, staleness or skipping, the adaptive codec, --exchange auto: what they send is not fixed)."""
    fixed = (args.model in PRICED_MODELS and args.codec != "adaptive" and getattr(args, "exchange", "flags") == "flags"
             and not args.staleness and not args.skip_threshold)
    return {"model": args.model, "hidden": args.hidden, "layers": args.layers or 2, "codec": args.codec} if fixed else None


def shape_note(args: argparse.Namespace, meta: dict, classes: int) -> str | None:
    """One line where this run differs from the shape its partition was priced for (partition.json's
    `priced_for`): which flags, and what the cost model predicts for the shape actually run beside the one
    priced. None where they agree, where no shape was priced (older partitions, --balance nodes, typed and
    dynamic graphs), or where the model cannot price this run (a model of your own, staleness, skipping,
    the adaptive codec, --exchange auto)."""
    priced = meta.get("priced_for")
    shape = run_shape(args)
    if not isinstance(priced, dict) or shape is None or "stats" not in meta or meta.get("format_version") != 1:
        return None  # nothing priced (older partitions, --balance nodes, other methods), or nothing to price
    priced_alike = ("hidden", "layers", "codec")  # the built-in models share GCN's layer plan
    if all(shape[k] == priced.get(k) for k in priced_alike):
        return None
    flags = " ".join(f"--{k} {priced.get(k)}" for k in SHAPE_FLAGS)
    head = f"note: {args.partition} was partitioned for {flags}"
    from partition import costmodel
    from partition.part_counts import parts_from_meta

    differ = ", ".join(f"--{k} {shape[k]}" for k in priced_alike if shape[k] != priced.get(k))
    parts, profile = parts_from_meta(meta), args.machine_profile
    epoch = lambda s: costmodel.predict(parts, costmodel.Workload(  # noqa: E731
        meta["num_features"], classes, s["hidden"], s["layers"], not args.no_overlap, s["codec"]), profile).epoch_s
    try:
        then = epoch(priced)
    except (KeyError, TypeError, ValueError):  # a priced_for edited by hand: the run's figure alone
        then = None
    now = epoch(shape)
    if then is not None and abs(now - then) < 0.02 * then:  # within the model's error: nothing to act on
        return None
    return (f"{head}, this run has {differ}: the cost model predicts {now:.4g} s an epoch for it"
            + (f" ({then:.4g} s for the shape partitioned for)" if then is not None else "")
            + f"; partition again with {differ} for a default partition chosen for this run")


def say_shape(args: argparse.Namespace, ctx, meta: dict, kind: str) -> None:
    """`shape_note` on rank 0's stderr, for plain graphs (the cost model prices no other)."""
    width = args.hidden if args.task == "link" else meta["num_classes"]
    if ctx.is_main and kind == "static" and (note := shape_note(args, meta, width)):
        sys.stderr.write(f"[gnn-dist] {note}\n")


def check_workload(args: argparse.Namespace) -> None:
    if args.hidden < 1 or args.layers < 1:
        raise UsageError(f"--hidden and --layers must be >= 1, got {args.hidden} and {args.layers}")


def workload(args: argparse.Namespace, graph):
    from partition.costmodel import Workload

    return Workload(features=graph.num_features, classes=graph.num_classes, hidden=args.hidden, layers=args.layers,
                    codec=args.codec)


def default_parts(args: argparse.Namespace, graph, kwargs: dict):
    """The weighted method's partition whose predicted slowest rank is fastest (partition.cost_parts), with
    the candidates' predicted epochs in one line; `kwargs` (what partition.json records) gains the objective
    of the candidate chosen."""
    from gnn_dist.cli.partition_cmd import log
    from partition import assign_parts
    from partition.cost_parts import choose

    def run(weights):
        if weights is None:
            return assign_parts(graph, args.parts, args.method, **kwargs)
        return assign_parts(graph, args.parts, args.method, **dict(kwargs, vweights=weights[:, None]))

    others = {}
    if args.method == "metis" and args.objective is None:  # an --objective given is the only one tried
        others["volume"] = lambda: assign_parts(graph, args.parts, "metis", **dict(kwargs, objective="vol"))
    choice = choose(graph, args.parts, run, workload(args, graph), args.machine_profile, others,
                    candidate_workers(graph, args.method))
    log("cost model: predicted epoch by candidate: "
        + ", ".join(f"{k} {v:.4f} s" for k, v in choice.considered.items())
        + f"; chose {choice.name} (node counts stay unless another is predicted at least 2% faster; "
          f"--balance nodes keeps them always)")
    args.cost_choice = choice.name
    if choice.name.startswith("volume"):
        kwargs["objective"] = "vol"  # partition.json's objective is the one that made the partition written
    return choice.parts


def candidate_workers(graph, method: str) -> int:
    """How many candidates to partition at once: every one where 2 CPUs or more are usable (a quota counts:
    three METIS runs on 2 cores end sooner all at once than two, then one), as many as the memory available
    holds METIS working sets; one for the methods that run threads of their own (Mt-KaHyPar)."""
    from gnn_dist.cli.partition_cmd import working_set_bytes
    from gnn_dist.runtime.cgroups import usable_cpus
    from partition.memory import available_bytes

    if method not in ("metis", "kahip") or usable_cpus() < 2:
        return 1
    room, _ = available_bytes()
    return max(1, int(room // max(1, working_set_bytes(graph, method)))) if room is not None else 1 << 10


def kept_if_faster(args: argparse.Namespace, graph, chosen, refined):
    """--refine on the cost model's choice: kept only where the predicted slowest rank falls (the default's
    promise), said in one line either way."""
    from gnn_dist.cli.partition_cmd import log
    from partition.costmodel import predict
    from partition.part_counts import part_counts

    src, dst = graph.edge_index()
    before, after = (predict(part_counts(src, dst, p, args.parts), workload(args, graph), args.machine_profile).epoch_s
                     for p in (chosen, refined))
    keep = after < before
    log(f"cost model: refinement {'kept' if keep else 'left out'}: predicted epoch {before:.4g} -> {after:.4g} s")
    return refined if keep else chosen


def predicted(args: argparse.Namespace, graph, written: dict) -> str:
    """The written partition's predicted epoch: the busiest rank and its bottleneck, then each rank's figures."""
    from partition.costmodel import format_ranks, predict
    from partition.part_counts import parts_from_meta

    pred = predict(parts_from_meta(written), workload(args, graph), args.machine_profile)
    plan = "" if args.model == "gcn" else ", GCN's layer plan"
    text = (f"cost model ({args.model.upper()}{plan}, hidden {args.hidden}, {args.layers} layers, {args.codec} rows, machine "
            f"'{args.machine_profile.name}'): {pred.summary()}")
    return text + ("\n" + format_ranks(pred) if args.parts <= 32 and getattr(args, "verbose", True) else "")
