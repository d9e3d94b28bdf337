"""`gnn-dist train`: run under `mpiexec -n P` (or torchrun) on a partition directory."""
from __future__ import annotations

import argparse
import sys

from gnn_dist import progress
from gnn_dist.cli import cost_report, model_file
from gnn_dist.cli.exchange_flags import auto_exchange, exchange_config, say_single_rank, stale_flags
from gnn_dist.cli.train_flags import add_train_flags, check_outputs
from partition.errors import GnnDistError, UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a GNN on a partition (launch with mpiexec -n P)",
                       description="Full-graph training on P ranks: mpiexec -n P gnn-dist train --partition DIR ...")
    add_train_flags(p)
    p.set_defaults(run=run)


def model_config(a: argparse.Namespace, **typed):
    """The builder's view of the flags (gnn_dist.nn.ModelConfig), not argparse's."""
    from gnn_dist.nn.registry import ModelConfig

    return ModelConfig(hidden=a.hidden, layers=a.layers, dropout=a.dropout, heads=a.heads,
                       num_bases=getattr(a, "num_bases", 0) or None, task=getattr(a, "task", "node"), **typed)


def check_model(spec: str) -> None:
    from gnn_dist.nn import registry

    registry.check(spec)


def check_args(a: argparse.Namespace) -> None:
    from gnn_dist.nn.registry import graph_kind, is_user_model
    from gnn_dist.train.dynamic import RESUME_WITH_POLICY

    check_model(a.model)
    dynamic = graph_kind(a.model) == "dynamic"
    a.layers = a.layers if a.layers is not None else (1 if dynamic else 2)
    a.epochs = a.epochs if a.epochs is not None else (50 if dynamic else 200)
    a.weight_decay = a.weight_decay if a.weight_decay is not None else (0.0 if dynamic else 5e-4)
    given = {"heads": a.heads is not None, "num_bases": a.num_bases is not None}  # (refused below if meaningless)
    a.heads = 8 if a.heads is None else a.heads
    a.num_bases = 2 if a.num_bases is None else a.num_bases
    rules = [
        (a.window >= 1, f"--window must be >= 1, got {a.window}"),
        (a.snapshot_group >= 0, f"--snapshot-group must be >= 0 (0: automatic), got {a.snapshot_group}"),
        (a.num_bases >= 0, f"--num-bases must be >= 0, got {a.num_bases}"),
        (a.early_stop >= 0 and a.lr_step >= 1 and a.lr_gamma > 0, "--early-stop >= 0, --lr-step >= 1, --lr-gamma > 0 required"),
        (not (a.early_stop or a.keep_best) or a.eval_every >= 1, "--early-stop/--keep-best need --eval-every >= 1"),
        (a.task == "node" or graph_kind(a.model) in ("static", None), "--task link applies to static graph models"),
        (not (dynamic and (a.early_stop or a.keep_best)),
         "--early-stop and --keep-best need a validation metric; dynamic graphs score train and test periods only"),
        (not a.relagg or (a.model == "rgcn" and a.codec == "fp32" and not a.staleness and not a.skip_threshold),
         "--relagg applies to --model rgcn with exact fp32 messages"),
        (not (dynamic and a.resume) or (a.codec != "adaptive" and not a.staleness and not a.skip_threshold),
         RESUME_WITH_POLICY),
        (not dynamic or not a.no_plan_cache or (a.codec != "adaptive" and not a.staleness and not a.skip_threshold),
         "adaptive bit-widths, staleness and skipping keep state per snapshot group across epochs, so they need "
         "the plan cache (drop --no-plan-cache)"),
        (a.exchange == "flags" or (a.codec == "fp32" and not a.staleness and not a.skip_threshold and not stale_flags(a)),
         "--exchange auto picks the codec, staleness and skipping itself: drop --codec, --staleness, --stale-*, "
         "--skip-threshold"),
        (a.exchange == "flags" or not dynamic, "--exchange auto applies to static graphs"),
        (a.layers >= 1, f"--layers must be >= 1, got {a.layers}"),
        (a.hidden >= 1, f"--hidden must be >= 1, got {a.hidden}"),
        (a.embedding_dim is None or a.embedding_dim >= 1, f"--embedding-dim must be >= 1, got {a.embedding_dim}"),
        (a.heads >= 1, f"--heads must be >= 1, got {a.heads}"),
        (a.epochs >= 1, f"--epochs must be >= 1, got {a.epochs}"),
        (a.lr > 0, f"--lr must be > 0, got {a.lr}"),
        (a.weight_decay >= 0, f"--weight-decay must be >= 0, got {a.weight_decay}"),
        (0 <= a.dropout < 1, f"--dropout must be in [0, 1), got {a.dropout}"),
        (a.eval_every >= 0 and a.checkpoint_every >= 0, "--eval-every and --checkpoint-every must be >= 0"),
        (a.timeout > 0, f"--timeout must be > 0, got {a.timeout}"),
        (a.heartbeat_timeout > 1, f"--heartbeat-timeout must be > 1 (seconds), got {a.heartbeat_timeout}"),
        (a.threads is None or a.threads >= 1, f"--threads must be >= 1, got {a.threads}"),
        (not (a.checkpoint_every or a.resume) or a.checkpoint_dir, "--checkpoint-every/--resume need --checkpoint-dir"),
    ]
    for ok, msg in rules:
        if not ok:
            raise UsageError(msg)
    check_outputs(a)  # every rank, before any collective: not rank 0 alone, mid-run
    exchange_config(a)  # bad values first, then flags that would mean nothing here
    user, auto = is_user_model(a.model), a.exchange == "auto"
    for ok, msg in [
        (not given["heads"] or a.model == "gat" or user, f"--heads applies to --model gat (or your own model, as "
                                                         f"config.heads), not {a.model}"),
        (not given["num_bases"] or a.model == "rgcn" or user, f"--num-bases applies to --model rgcn (or your own "
                                                              f"model, as config.num_bases), not {a.model}"),
        (a.staleness or auto or not stale_flags(a), "--stale-* shape the stale blocks of --staleness S: give "
                                                    "--staleness too, or drop them"),
        (a.skip_threshold or a.refresh_every == 10, "--refresh-every applies with --skip-threshold"),
        (a.codec == "adaptive" or auto or (a.adaptive_every, a.budget_bits) == (50, 4),
         "--adaptive-every and --budget-bits apply to --codec adaptive"),
    ]:
        if not ok:
            raise UsageError(msg)
    progress.flag_mode(a)


def run(args: argparse.Namespace) -> int:
    from partition.store import read_meta

    huge_pages_for(args.partition, args.hidden)
    check_args(args)
    meta = read_meta(args.partition)  # before any network: a bad directory fails fast on every rank
    kind = check_partition_kind(args, meta)
    args.machine_profile = cost_report.read_profile(args.machine)  # a bad one fails on every rank, before any network
    import torch

    from gnn_dist.runtime.launch import init

    ctx = init(backend=args.backend, timeout_s=args.timeout, iface=args.iface, expected_world=meta["num_parts"],
               transport=args.transport, heartbeat_timeout_s=args.heartbeat_timeout, threads=args.threads,
               announce=progress.flag_mode(args) != "none", gpu_memory_fraction=args.gpu_memory_fraction)
    if args.memory_report:
        from gnn_dist.runtime.malloc import resident_bytes

        args.runtime_bytes = resident_bytes()  # before the partition is read: the runtime's own share
    torch.manual_seed(args.seed)
    cost_report.say_shape(args, ctx, meta, kind)  # one line where the partition was priced for another run shape
    say_single_rank(args, ctx)  # one line where exchange flags have no halo to act on
    setup = {"dynamic": dynamic_setup, "static": static_setup, "typed": static_setup}[kind]
    model, make_trainer, summary = setup(args, ctx, meta)

    def fit() -> tuple[dict, list]:
        from gnn_dist.train import tblog

        trainer = make_trainer()
        trainer.tensorboard = tblog.for_rank(args.tensorboard, ctx.is_main)
        return trainer.fit(args.epochs, resume=args.resume), trainer.history

    return fit_and_report(ctx, args, model, fit, summary)


def huge_pages_for(partition_dir: str, hidden: int) -> None:
    """torch's huge pages where this partition's activations are large (gnn_dist.runtime.malloc), decided
    before anything imports torch, which reads the setting once; a partition that cannot be read is
    reported later, after the flags are checked."""
    from gnn_dist.runtime.malloc import activation_bytes, prefer_huge_pages
    from partition.store import read_meta

    try:
        prefer_huge_pages(activation_bytes(read_meta(partition_dir), hidden))
    except GnnDistError:
        pass


# Flags that only some kinds of graph use: (default, kinds). Set elsewhere, they are refused, not ignored.
KIND_FLAGS = {"window": (8, ("dynamic",)), "snapshot_group": (0, ("dynamic",)), "plans": ("incremental", ("dynamic",)),
              "no_plan_cache": (False, ("dynamic",)),
              "normalize_features": (False, ("static",)), "relagg": (False, ("typed",)), "num_bases": (2, ("typed",)),
              "memory_report": (False, ("static", "typed"))}


def check_partition_kind(args: argparse.Namespace, meta: dict) -> str:
    """static, typed or dynamic; refuses a model or flag that does not apply to that kind of graph."""
    from gnn_dist.nn.registry import graph_kind, is_user_model, names

    dynamic, typed = "num_snapshots" in meta, meta.get("format_version") == 2
    kind = "dynamic" if dynamic else "typed" if typed else "static"
    if graph_kind(args.model) not in (kind, None) or (dynamic and graph_kind(args.model) is None):
        what = {"dynamic": "a dynamic graph (snapshots)", "typed": "a typed graph", "static": "a static graph"}
        raise UsageError(f"{args.partition} holds {what[kind]}; --model {args.model} does not apply "
                         f"(use {', '.join(names(kind))}{'' if dynamic else ', or your own MODULE:FUNCTION'})")
    for flag, (default, kinds) in KIND_FLAGS.items():
        if flag == "num_bases" and is_user_model(args.model):  # your own model takes it in its config
            continue
        if getattr(args, flag) != default and kind not in kinds:
            raise UsageError(f"--{flag.replace('_', '-')} applies to {' and '.join(kinds)} graphs; "
                             f"{args.partition} holds a {kind} graph")
    if kind == "static" and args.task == "node" and meta.get("num_classes", 1) == 0:
        raise UsageError(f"{args.partition} has no node labels (its data set gave none, as an edge list does): node "
                         f"classification cannot train; use --task link (partition with --link-split)")
    if dynamic and args.window > meta["num_train_snapshots"]:
        raise UsageError(f"--window {args.window} is longer than the {meta['num_train_snapshots']} training "
                         f"snapshots of {args.partition}")
    return kind


def loop_options(a: argparse.Namespace) -> dict:
    """The flags every task's training loop honours (gnn_dist.train.loop.Loop)."""
    return dict(optimizer=a.optimizer, lr=a.lr, weight_decay=a.weight_decay, seed=a.seed, log_path=a.log,
                checkpoint_dir=a.checkpoint_dir, checkpoint_every=a.checkpoint_every, eval_every=a.eval_every,
                progress=progress.flag_mode(a), lr_schedule=a.lr_schedule, epochs=a.epochs, lr_step=a.lr_step,
                lr_gamma=a.lr_gamma, early_stop=a.early_stop, keep_best=a.keep_best,
                memory_report=getattr(a, "runtime_bytes", None), model_spec=model_file.spec(a))


def static_setup(args: argparse.Namespace, ctx, meta: dict):
    """Node classification or link prediction on a static or typed graph."""
    graph = load_graph(args, ctx, meta, exchange_config(args), verify=not args.no_verify)
    width = args.hidden if args.task == "link" else graph.num_classes  # link: the model emits embeddings
    model = build_user_or_builtin(args, ctx, graph, width)
    if args.exchange == "auto":
        auto_exchange(args, ctx, graph, width)
    best = lambda f: f" (weights of best epoch {f['best_epoch'] + 1})" if "best_epoch" in f else ""  # noqa: E731
    loss = lambda f: f"loss {f['loss']:.4f} | " if "loss" in f else ""  # noqa: E731  (none: nothing was trained)
    if args.task == "link":
        from gnn_dist.train.link import LinkTrainer

        return model, lambda: LinkTrainer(model, graph, ctx, args.partition, **loop_options(args)), lambda f: (
            f"final {counted(f, args.epochs)}: {loss(f)}val auc {f['val_auc']:.4f} | test auc {f['test_auc']:.4f}"
            + best(f))
    from gnn_dist.train.node import Trainer

    first = cost_report.prediction(args, ctx, meta, graph.num_classes)  # the cost model's, in the first record
    return model, lambda: Trainer(model, graph, ctx, meta.get("metric"), **loop_options(args), log_first=first), lambda f: (
        f"final {counted(f, args.epochs)}: {loss(f)}"
        + " | ".join(f"{k.replace('_', ' ')} {v:.4f}" for k, v in f.items() if k.endswith(("_acc", "_f1", "_rocauc")))
        + best(f))


def dynamic_setup(args: argparse.Namespace, ctx, meta: dict):
    """Windows of snapshots with truncated backpropagation through time."""
    from gnn_dist.graph.dynamic import SnapshotSequence
    from gnn_dist.nn.registry import build
    from gnn_dist.train.dynamic import RESUME_WITH_POLICY, DynamicTrainer

    seq = SnapshotSequence(args.partition, ctx, exchange_config(args), overlap=not args.no_overlap,
                           mode=args.plans, cache=not args.no_plan_cache, verify=not args.no_verify)
    out = 1 if seq.task == "regression" else seq.num_classes
    model = build(args.model, seq.num_features, out, model_config(args))
    if ctx.is_main:  # flags that work but lead nowhere later: said now, not found out then
        if args.checkpoint_every and (args.codec == "adaptive" or args.staleness or args.skip_threshold):
            sys.stderr.write(f"[gnn-dist] note: this run's checkpoints cannot be resumed: {RESUME_WITH_POLICY}\n")
        if args.save_model:
            sys.stderr.write("[gnn-dist] note: predict does not take snapshot partitions yet; the --save-model file "
                             "holds the weights as data (torch.load(F, weights_only=True)['state'], docs/training.md)\n")

    def summary(final: dict) -> str:
        parts = [f"final {counted(final, args.epochs)}" + (f": loss {final['loss']:.4f}" if "loss" in final else "")]
        parts += [f"{k.replace('_', ' ')} {v:.4f}" for k, v in final.items() if k.startswith(("train_", "test_"))]
        return " | ".join(parts + [f"plan time {seq.plan_seconds:.2f}s"])

    return model, lambda: DynamicTrainer(model, seq, ctx, window=args.window, snapshot_group=args.snapshot_group,
                                                **loop_options(args)), summary


def counted(record: dict, epochs: int) -> str:
    """'epoch 200/200': epochs done, as the progress bar counts them (the log's `epoch` field counts from 0)."""
    e = record.get("epoch")
    return f"epoch {e + 1}/{epochs}" if isinstance(e, int) else f"epoch -/{epochs}"


def load_graph(args: argparse.Namespace, ctx, meta: dict, exchange=None, verify: bool = True):
    """This rank's part of a static or typed partition, features normalised as the run asked."""
    overlap = not getattr(args, "no_overlap", False)
    if meta.get("format_version") == 2:
        from gnn_dist.graph.typed import load_typed_partition

        return load_typed_partition(args.partition, ctx, overlap=overlap, verify=verify, exchange=exchange,
                                     relagg=getattr(args, "relagg", False))
    from gnn_dist.graph.load import load_partition

    graph = load_partition(args.partition, ctx, overlap=overlap, verify=verify, exchange=exchange)
    if getattr(args, "normalize_features", False):
        graph.x = graph.x / graph.x.sum(dim=1, keepdim=True).clamp(min=1)
    return graph


def build_user_or_builtin(args: argparse.Namespace, ctx, graph, num_classes: int):
    """The model --model names, with learnable rows for nodes without features; an error inside a user's
    builder is reported as that code's error."""
    from gnn_dist.nn.embedding import Embedded, input_widths, with_embeddings
    from gnn_dist.nn.registry import build
    from gnn_dist.runtime.launch import describe_user_error

    dim = getattr(args, "embedding_dim", None) or args.hidden
    width, dims = input_widths(graph, dim)
    typed = {} if graph.types is None else {"feature_dims": dims,
                                            "edge_types": tuple(":".join(e) for e in graph.types.edge_types)}
    try:
        model = with_embeddings(build(args.model, width, num_classes, model_config(args, **typed)), graph, dim, args.seed)
    except GnnDistError:
        raise
    except Exception as e:
        if getattr(args, "debug", False):
            raise
        raise UsageError(f"--model {args.model}: building the model failed: {describe_user_error(e)}") from None
    if isinstance(model, Embedded) and ctx.is_main:
        names = ", ".join(model.embeddings)
        what = ("the graph has" if graph.types is None else
                f"node types {names} have" if len(model.embeddings) > 1 else f"node type {names} has")
        sys.stderr.write(f"[gnn-dist] note: {what} no features: a learnable {dim}-wide input row per node, held by its "
                         f"owner (--embedding-dim)\n")
    return model


def fit_and_report(ctx, args: argparse.Namespace, model, fit, summary) -> int:
    """Train; rank 0 saves the model (and curves) and prints one line.

    A broken collective leaves as the peer that broke it says; an error raised
    in model code (or its sys.exit) is reported by the rank that raised it, in
    one line (--debug: the traceback), and its peers leave with its code.
    """
    try:
        final, history = fit()
    except GnnDistError:  # the data or flags, not the code
        raise
    except (Exception, SystemExit) as e:
        ctx.leave_on(e)
    if args.save_model:  # every rank: learnable node rows are gathered to rank 0
        from gnn_dist.train.checkpoint import model_state

        state = model_state(model, ctx)
        if ctx.is_main:
            model_file.write(args.save_model, args, state)
    if ctx.is_main:
        if args.plot and history:
            from gnn_dist.cli.plots import plot_run

            plot_run(history, args.plot)
        print(summary(final))
        sys.stdout.flush()
    ctx.close()
    return 0
