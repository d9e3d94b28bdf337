"""`gnn-dist partition`: load a data set, assign parts, build plans, write the directory."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from gnn_dist import progress
from gnn_dist.cli import cost_report
from gnn_dist.cli.cost_report import PRICED_MODELS
from partition.dynamic import Snapshots
from partition.errors import DataError, UsageError
from partition.methods import BALANCE_KEYS, WEIGHTED, constraint_balance
from partition.typed import TypedGraph
from partition.wire import CODECS


def add_parser(sub) -> None:
    p = sub.add_parser("partition", help="split a graph into parts with halo plans",
                       description="Split a graph into K parts and write a partition directory (docs/design.md §3).")
    p.add_argument("--dataset", required=True,
                   help="a name or FORM:PATH[?options]: cora | file:GRAPH.npz | pyg:CLASS[:NAME] | ogb:ogbn-NAME | "
                        "edges:FILE_GLOB_OR_DIR | metis:FILE.graph | json:SERIES.json | hfile:GRAPH.npz | "
                        "sbm:key=value,... | rmat:... | hsbm:... | chickenpox | ... (`gnn-dist datasets` lists every "
                        "form and what it needs on disk)")
    p.add_argument("--parts", type=int, required=True, help="number of parts (= training ranks)")
    p.add_argument("--method", default="metis",
                   choices=["metis", "mtkahypar", "kahip", "random", "contiguous", "ldg", "fennel"],
                   help="metis (default); mtkahypar or kahip (optional extras: pip install 'gnn-dist[mtkahypar]' "
                        "or '[kahip]'); baselines random and contiguous; or streaming ldg / fennel for graphs "
                        "whose METIS run would not fit in memory")
    p.add_argument("--kahip-mode", default="eco", choices=["fast", "eco", "strong"],
                   help="kahip: kaffpa's configuration, from quickest to best cut (default eco)")
    p.add_argument("--passes", type=int, default=1, help="streaming methods: passes over the nodes (restreaming)")
    p.add_argument("--stream-order", default="bfs", choices=["bfs", "random"],
                   help="streaming methods: one node at a time in breadth-first order (default; follows meshes), "
                        "or in batches in a seeded random order (what `gnn-dist assign` does over MPI ranks)")
    p.add_argument("--assignment", default=None, metavar="PARTS.npy",
                   help="use this node -> part array (e.g. from `mpiexec -n R gnn-dist assign`) instead of --method")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--seed", type=int, default=0, help="seed for METIS and the random baseline (default 0)")
    p.add_argument("--refine", action="store_true",
                   help="after any method, move nodes so that the busiest part sends and receives fewer rows per "
                        "layer (the epoch waits for it), node counts within 3%% of the mean or the method's own")
    p.add_argument("--balance", default="",
                   help="metis, mtkahypar and kahip: by default the partition whose predicted slowest rank is "
                        "fastest (the cost model, --machine), node counts within 2x the mean; or balance these, "
                        "comma separated: nodes (node counts only), train, degree")
    cost_report.add_machine_flag(p, "the cost model's choice of the default partition and its prediction")
    p.add_argument("--hidden", type=int, default=16, help="cost model: the hidden width you will train (default 16)")
    p.add_argument("--layers", type=int, default=2, help="cost model: the graph layers you will train (default 2)")
    p.add_argument("--model", default="gcn", choices=PRICED_MODELS,
                   help="cost model: the built-in model you will train (default gcn; the others are priced with "
                        "GCN's layer plan: one sparse product and one linear map a layer)")
    p.add_argument("--codec", default="fp32", choices=CODECS,
                   help="cost model: how you will send halo rows (train's --codec; default fp32, exact)")
    p.add_argument("--objective", default=None, choices=["cut", "vol"],
                   help="metis and mtkahypar: edge cut, or communication volume (mtkahypar: exactly the halo rows, "
                        "as hypergraph connectivity of each node's out-neighbourhood) (default cut; metis's "
                        "default partition also tries vol)")
    p.add_argument("--data-dir", default=None, help="folder holding shipped data sets (default: found automatically)")
    p.add_argument("--link-split", default=None, metavar="VAL,TEST",
                   help="hold out these fractions of edges (pairs) for link prediction, with as many negatives; "
                        "they are removed from the partitioned graph and kept in link_edges.npz")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out")
    p.add_argument("--ignore-memory-check", action="store_true",
                   help="start even when the estimated peak memory exceeds what is available (MemAvailable, or "
                        "the cgroup's limit); without it such work is refused in one line")
    p.add_argument("--fast-nondeterministic", action="store_true",
                   help="mtkahypar: its faster default preset, whose threads race, so the same command and --seed "
                        "may give a different partition each run (default: the deterministic preset, same "
                        "partition bit for bit on any thread count)")
    p.add_argument("--verbose", action="store_true",
                   help="also print the machine profile the cost model prices with, and its per-rank predictions")
    progress.add_flag(p)
    p.set_defaults(run=run)


def log(msg: str) -> None:
    sys.stderr.write(f"[gnn-dist] {msg}\n")
    sys.stderr.flush()


def graph_bytes(graph) -> int:
    e, n = graph.num_edges, graph.num_nodes
    return 8 * (n + 1) + 8 * e + (4 * e if graph.edge_weight is not None else 0) + graph.x.nbytes + 11 * n


def method_options(args: argparse.Namespace) -> dict:
    """What --method takes besides the seed: METIS's and Mt-KaHyPar's objective, KaHIP's mode."""
    objective = args.objective or "cut"
    if args.method == "mtkahypar":
        return {"objective": objective, "deterministic": not args.fast_nondeterministic}
    if args.fast_nondeterministic:
        raise UsageError(f"--fast-nondeterministic applies to --method mtkahypar; {args.method} is deterministic")
    if args.method == "metis":
        return {"objective": objective}
    if args.objective is not None:  # given, even as `cut`, to a method that has none: said, not ignored
        raise UsageError(f"--objective {args.objective} applies to --method metis and mtkahypar, not {args.method}")
    return {"mode": args.kahip_mode} if args.method == "kahip" else {}


def working_set_bytes(graph, method: str) -> int:
    """What partitioning adds to the loaded graph: the symmetric adjacency the method builds (COO -> CSR,
    sum with its transpose: about four int64 copies of 2E entries for METIS and the streaming methods),
    plus one part's plan while it is written."""
    e = graph.num_edges
    work = 4 * 16 * e if method in ("metis", "mtkahypar", "kahip", "ldg", "fennel") else 8 * graph.num_nodes
    return work + graph_bytes(graph) // 2


def check_memory(work: int, args: argparse.Namespace) -> None:
    """Refuse, in one line, work whose estimated working set does not fit in the memory available."""
    from partition.memory import available_bytes

    room, source = available_bytes()
    if room is None or work <= room:
        return
    if args.ignore_memory_check:
        log(f"warning: the {args.method} working set {work / 2**30:.2f} GiB exceeds the {room / 2**30:.2f} GiB "
            f"available ({source}); going on (--ignore-memory-check)")
        return
    cheaper = "; --method fennel or ldg needs less" if args.method in ("metis", "mtkahypar", "kahip") else ""
    raise UsageError(f"the {args.method} working set, estimated at {work / 2**30:.2f} GiB, exceeds the "
                     f"{room / 2**30:.2f} GiB available ({source}){cheaper}; --ignore-memory-check starts anyway")


def run(args: argparse.Namespace) -> int:
    from gnn_dist.data import load_dataset
    from partition import build_parts, format_stats, partition_stats, write_partition
    from partition.store import check_out_dir

    out = Path(args.out)
    if args.parts < 1:
        raise UsageError(f"--parts must be at least 1, got {args.parts}")
    progress.flag_mode(args)
    check_out_dir(out, args.force)  # fail before hours of work, not after
    if args.assignment:  # the file and the method's flags, before the load: said, not ignored
        if not Path(args.assignment).is_file():
            raise DataError(f"assignment {args.assignment} does not exist")
        given = [flag for flag, on in ((f"--method {args.method}", args.method != "metis"),
                                       (f"--objective {args.objective}", args.objective is not None),
                                       (f"--balance {args.balance}", bool(args.balance)),
                                       ("--fast-nondeterministic", args.fast_nondeterministic)) if on]
        if given:
            raise UsageError(f"--assignment takes the parts as given; {given[0]} would do nothing with it")
    balance = tuple(b for b in args.balance.split(",") if b)
    for key in balance:  # before loading: a typo should not cost the load
        if key not in BALANCE_KEYS + ("nodes",):
            raise UsageError(f"unknown balance key '{key}' (choose from nodes, {', '.join(BALANCE_KEYS)})")
    args.by_cost = not balance  # the default: the cost model's choice (--balance nodes: node counts only)
    balance = tuple(b for b in balance if b != "nodes")
    cost_report.check_workload(args)
    args.machine_profile = cost_report.read_profile(args.machine)  # a bad profile fails before the load too
    method_options(args)  # a flag the method does not take fails before the load too
    t0 = time.perf_counter()
    log(f"loading {args.dataset}")
    graph = load_dataset(args.dataset, data_dir=args.data_dir, seed=args.seed)
    cost_report.say_machine(args, graph)
    if args.assignment:
        if isinstance(graph, (Snapshots, TypedGraph)):
            raise UsageError("--assignment applies to plain graphs, not dynamic or typed ones")
        args.method = "assignment"
    if isinstance(graph, Snapshots):
        return run_snapshots(args, graph, balance, t0)
    if isinstance(graph, TypedGraph):
        return run_typed(args, graph, balance, t0)
    log(f"{graph.name}: {graph.num_nodes} nodes, {graph.num_edges} edges, {graph.num_features} features, "
        f"{graph.num_classes} classes ({time.perf_counter() - t0:.1f}s)")
    graph, links = hold_out_links(args, graph)
    if args.parts < 1 or args.parts > graph.num_nodes:
        raise UsageError(f"--parts must be between 1 and the number of nodes ({graph.num_nodes}), got {args.parts}")
    from gnn_dist.runtime.malloc import resident_bytes

    now, work = resident_bytes(), working_set_bytes(graph, args.method)
    log(f"estimated peak memory {(now + work) / 2**30:.2f} GiB ({now / 2**30:.2f} GiB resident with the graph "
        f"loaded, plus the {args.method} working set {work / 2**30:.2f} GiB)")
    check_memory(work, args)
    t1 = time.perf_counter()
    parts, kwargs = assign(args, graph, balance)
    t_assign = time.perf_counter() - t1
    meta = static_meta(args, graph, parts, kwargs, balance)
    bar = progress.Progress(args.parts, "writing parts", "parts", progress.flag_mode(args))
    written = write_partition(out, meta, parts, build_parts(graph, parts, args.parts), force=args.force,
                              on_part=lambda _: bar.update(),
                              summarize=lambda rows: {"stats": partition_stats(graph, parts, rows)},
                              root_files=root_files(graph, links))
    bar.close()
    print(format_stats(written["stats"], written["parts"]))
    report_constraints(meta["constraints"], balance, getattr(args, "cost_choice", "node counts") != "node counts")
    print(cost_report.predicted(args, graph, written))
    log(f"wrote {out} (assign {t_assign:.1f}s, total {time.perf_counter() - t0:.1f}s)")
    return 0


def static_meta(args: argparse.Namespace, graph, parts, kwargs: dict, balance: tuple) -> dict:
    """partition.json's fields for a static graph (write_partition adds the per-part rows and checksums)."""
    return {
        "graph": graph.name, "dataset": args.dataset, "num_parts": args.parts, "method": args.method,
        "objective": kwargs.get("objective"), "deterministic": kwargs.get("deterministic", True),
        "balance": list(balance),
        "seed": args.seed, "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
        "num_features": graph.num_features, "num_classes": graph.num_classes, "metric": graph.metric,
        "num_train": int(graph.train_mask.sum()), "weighted": graph.edge_weight is not None,
        "node_types": None, "edge_types": None, "link_split": args.link_split,
        "relabelled": graph.original_ids is not None,
        "constraints": constraint_balance(graph, parts, args.parts, balance),
        "chosen_by_cost": getattr(args, "cost_choice", None),
        "priced_for": cost_report.priced_for(args),
    }


def root_files(graph, links: dict | None) -> dict:
    """Files beside the parts: held-out link pairs, and the input's ids where the loader compacted them."""
    from partition.store import LINK_FILE, ORIGINAL_IDS_FILE

    files = {LINK_FILE: links} if links else {}
    if graph.original_ids is not None:
        files[ORIGINAL_IDS_FILE] = graph.original_ids
    return files


def hold_out_links(args: argparse.Namespace, graph):
    """--link-split VAL,TEST: the graph without the held-out pairs, and the pairs (None without the flag)."""
    if not args.link_split:
        return graph, None
    from partition.link_split import split_links

    try:
        val, test = (float(v) for v in args.link_split.split(","))
    except ValueError:
        raise UsageError(f"--link-split wants VAL,TEST (e.g. 0.05,0.1), got '{args.link_split}'") from None
    graph, links = split_links(graph, val, test, args.seed)
    log(f"held out {links['val_src'].shape[0]} validation and {links['test_src'].shape[0]} test edge pairs")
    return graph, links


def assign(args: argparse.Namespace, graph, balance: tuple):
    """node -> part by --method (or read from --assignment), refined if asked; with the method's options."""
    from partition import assign_parts

    kwargs = dict(method_options(args), seed=args.seed)
    if args.method in WEIGHTED:
        kwargs.update(balance=balance)
    elif balance:
        raise UsageError("--balance applies to --method metis, mtkahypar and kahip")
    if args.method in ("ldg", "fennel"):
        if args.passes < 1:
            raise UsageError(f"--passes must be >= 1, got {args.passes}")
        kwargs.update(passes=args.passes, order=args.stream_order)
    if args.assignment:
        from partition.methods import read_assignment

        log(f"reading the assignment {args.assignment}")
        parts = read_assignment(args.assignment, graph.num_nodes, args.parts)
    else:
        log(f"assigning {args.parts} parts with {args.method}")
        if args.method in WEIGHTED and args.by_cost:
            parts = cost_report.default_parts(args, graph, kwargs)
        else:
            parts = assign_parts(graph, args.parts, args.method, **kwargs)
    if args.refine:
        refined = refine(graph, parts, args.parts)
        parts = cost_report.kept_if_faster(args, graph, parts, refined) if getattr(args, "cost_choice", None) else refined
    return parts, kwargs


def refine(graph, parts, num_parts: int):
    """The busiest-rank refinement, with its figures before and after on one line."""
    from partition.methods import undirected_adjacency
    from partition.refine import refine_volume

    src, dst = graph.edge_index()
    parts, rep = refine_volume(undirected_adjacency(graph), src, dst, parts, num_parts)
    b, a = rep["before"], rep["after"]
    log(f"refined for the busiest part: rows sent max {b['max_send']} -> {a['max_send']}, received max "
        f"{b['max_recv']} -> {a['max_recv']}, total {b['total']} -> {a['total']} (per layer)")
    return parts


def report_constraints(constraints: dict, balance, by_cost: bool = False) -> None:
    """Each balance constraint as measured; a warning naming any that missed the tolerance, and by how much.
    A partition weighted by cost (`by_cost`) promises node counts within NODE_BOUND x the mean instead."""
    from partition.cost_parts import NODE_BOUND
    from partition.methods import unmet

    if balance:
        print("balance constraints (max / mean): " + " | ".join(f"{k} {v:.3f}" for k, v in constraints.items()))
    if by_cost:
        constraints = {k: v for k, v in constraints.items() if k != "nodes" or v > NODE_BOUND}
    missed = unmet(constraints)
    if missed:
        log("warning: balance not met: " + "; ".join(missed))



def run_snapshots(args: argparse.Namespace, seq: Snapshots, balance: tuple, t0: float) -> int:
    """A dynamic graph: partition the union graph once, then store every snapshot's plan as a difference."""
    from partition.dynamic_parts import write_snapshot_partition

    if balance:
        raise UsageError("--balance applies to static graphs only")
    log(f"{seq.name}: {seq.num_snapshots} snapshots of {seq.num_nodes} nodes, {seq.num_features} features, "
        f"{seq.task} ({time.perf_counter() - t0:.1f}s); partitioning the union graph")
    meta = write_snapshot_partition(args.out, seq, args.parts, args.method, seed=args.seed, force=args.force,
                                    dataset=args.dataset, **method_options(args))
    summary = meta["churn_summary"]
    print(f"{args.parts} parts of {seq.name}: {seq.num_snapshots} snapshots, halo {summary['halo_rows_mean']:.0f} rows "
          f"per snapshot (union {summary['halo_rows_union']}); per step {summary['halo_added_per_step']:.1f} halo "
          f"rows added, {summary['halo_removed_per_step']:.1f} removed, {summary['edges_added_per_step']:.1f} edges "
          f"added, {summary['edges_removed_per_step']:.1f} removed")
    log(f"wrote {args.out} (total {time.perf_counter() - t0:.1f}s)")
    return 0


def run_typed(args: argparse.Namespace, hg: TypedGraph, balance: tuple, t0: float) -> int:
    """Typed graph: METIS with one balance constraint per node type; typed features stored per type."""
    from partition import format_stats
    from partition.typed_parts import write_typed_partition

    if args.parts > hg.total_nodes:
        raise UsageError(f"--parts must be between 1 and the number of nodes ({hg.total_nodes}), got {args.parts}")
    log(f"{hg.name}: node types " + ", ".join(f"{t} {hg.num_nodes[t]} x {hg.x[t].shape[1]}" for t in hg.node_types)
        + f"; {len(hg.edge_types)} edge types; target {hg.target} ({hg.num_classes} classes)")
    meta = write_typed_partition(args.out, hg, args.parts, args.method, seed=args.seed, force=args.force,
                                  dataset=args.dataset, balance=balance, **method_options(args))
    print(format_stats(meta["stats"], meta["parts"]))
    report_constraints(meta["constraints"], ("types",) + balance)
    for t, name in enumerate(meta["node_types"]):
        counts = [row[t] for row in meta["type_counts"]]
        print(f"{name:>12}: per part {' / '.join(map(str, counts))} (max {max(counts) / (sum(counts) / len(counts)):.3f}x mean)")
    ra = meta["relagg"]
    print(f"relation aggregates first: {ra['relations_aggregated']} of {ra['pair_relations']} (owner, receiver, relation) "
          f"triples, {ra['relagg_rows']} rows per layer instead of {ra['raw_rows']}")
    log(f"wrote {args.out} (total {time.perf_counter() - t0:.1f}s)")
    return 0
