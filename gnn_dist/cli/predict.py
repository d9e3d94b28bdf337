"""`gnn-dist predict`: outputs of a trained model for every node, distributed, written in global id order."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gnn_dist.cli.launch_flags import add_gpu_memory_flag
from partition.errors import UsageError

OUTPUTS = ("logits", "probs", "labels", "embeddings")


def add_parser(sub) -> None:
    p = sub.add_parser("predict", help="write predictions or embeddings of every node (launch with mpiexec -n P)",
                       description="Run a model saved by `gnn-dist train --save-model` over the partition, with exact "
                                   "messages, and write one row per node in global id order (.npy, rank 0).")
    p.add_argument("--partition", required=True, help="partition directory the model runs on (static or typed)")
    p.add_argument("--model-file", required=True, help="file written by train --save-model")
    p.add_argument("--model", default=None, metavar="SPEC",
                   help="the model the file was saved with; required for your own MODULE:FUNCTION or "
                        "FILE.py:FUNCTION (gnn-dist imports no code that a file names)")
    p.add_argument("--out", required=True, help="output .npy (written atomically)")
    p.add_argument("--output", default="logits", choices=OUTPUTS,
                   help="logits (default), probs (softmax), labels (argmax) or embeddings (input of the last layer)")
    p.add_argument("--all-types", action="store_true",
                   help="typed graphs: write every node type's rows (type-erased global ids: types in partition.json "
                        "order, each type's ids after the previous types'); default: the target type's rows only")
    p.add_argument("--backend", default=None, choices=["gloo", "nccl", "staged"], help="as for train")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds any collective may take (default 120)")
    add_gpu_memory_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from partition.store import read_meta

    meta = read_meta(args.partition)
    if "num_snapshots" in meta:
        raise UsageError(f"{args.partition} holds snapshots; predict covers static and typed graphs")
    if args.all_types and meta.get("format_version") != 2:
        raise UsageError(f"--all-types applies to typed graphs; {args.partition} holds a static graph")
    if not Path(args.model_file).is_file():
        raise UsageError(f"model file {args.model_file} does not exist")
    from partition.book import PartitionBook

    original = PartitionBook(args.partition, meta).original_ids  # edges: compacted ids; checked on every rank, first

    import torch

    from gnn_dist.cli import model_file
    from gnn_dist.cli.train import load_graph
    from gnn_dist.nn import registry
    from gnn_dist.runtime.launch import init

    t, weights = model_file.read(args.model_file, args.model)  # data only; a user's model named again, or refused
    ctx = init(backend=args.backend, timeout_s=args.timeout, expected_world=meta["num_parts"],
               gpu_memory_fraction=args.gpu_memory_fraction)
    t.partition = args.partition
    graph = load_graph(t, ctx, meta)
    model = model_file.rebuild(t, weights, graph, ctx, f"{args.model_file} (on this partition)")
    if args.output == "embeddings" and not registry.accepts_embed(model):
        raise UsageError(f"--output embeddings needs a model whose forward takes embed=True; {t.model}'s does not")
    model.eval()  # eval mode under no_grad: exact messages
    with torch.no_grad():
        out = model(graph.x, graph, embed=True) if args.output == "embeddings" else model(graph.x, graph)
    multilabel = graph.y.dim() == 2  # independent labels: a sigmoid each, and every label with a positive logit
    if args.output == "probs":
        out = out.sigmoid() if multilabel else out.softmax(dim=1)
    elif args.output == "labels":
        out = (out > 0).to(torch.int8) if multilabel else out.argmax(dim=1)
    gids, rows, num_nodes, what = graph.global_ids[: graph.num_inner], out.cpu().numpy(), meta["num_nodes"], args.output
    if graph.types is not None and not args.all_types:  # the target type's rows, in that type's own ids
        t = meta["node_types"].index(meta["target_type"])
        mine = graph.types.node_type[: graph.num_inner] == t
        gids, rows = gids[mine] - sum(meta["node_counts"][:t]), rows[mine]
        num_nodes, what = meta["node_counts"][t], f"{args.output} of node type '{meta['target_type']}'"
    write_in_global_order(ctx, gids, rows, num_nodes, Path(args.out), what, original)
    ctx.close()
    return 0


def write_in_global_order(ctx, gids, values, num_nodes: int, target: Path, what: str, original_ids=None) -> None:
    """Rank 0 gathers every rank's rows and writes them by global id, atomically (temporary file, rename).
    Where the partition compacted sparse input ids, `original_ids` (row i's id in the input) goes beside
    the output as OUT.ids.npy (preds.npy -> preds.ids.npy), so the output itself keeps one layout."""
    import numpy as np
    import torch.distributed as dist

    gathered = [None] * ctx.world_size if ctx.is_main else None
    if ctx.world_size > 1:
        dist.gather_object((gids, values), gathered, dst=0)
    else:
        gathered = [(gids, values)]
    if not ctx.is_main:
        return
    first = gathered[0][1]
    result = np.zeros((num_nodes,) + first.shape[1:], dtype=first.dtype)
    for ids, rows in gathered:
        result[ids] = rows
    target.parent.mkdir(parents=True, exist_ok=True)
    ids_line = ""
    if original_ids is not None:
        ids_target = target.with_name(target.name.removesuffix(".npy") + ".ids.npy")
        save_atomic(ids_target, np.asarray(original_ids, np.int64))
        ids_line = f"; each row's input id in {ids_target}"
    save_atomic(target, result)
    print(f"wrote {target}: {what}, shape {tuple(result.shape)}, global id order{ids_line}")
    sys.stdout.flush()


def save_atomic(target: Path, array) -> None:
    import numpy as np

    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}.npy")
    np.save(tmp, array)
    os.replace(tmp, target)
