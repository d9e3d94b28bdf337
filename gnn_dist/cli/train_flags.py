"""The flags of `gnn-dist train`, grouped by what they act on: the model and optimiser, the exchange
(`exchange_flags`), the loop (evaluate, log, checkpoint, save), dynamic graphs and the launch."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from gnn_dist import progress
from gnn_dist.cli import cost_report
from gnn_dist.cli.exchange_flags import add_exchange_flags
from gnn_dist.cli.launch_flags import add_launch_flags


def add_train_flags(p: argparse.ArgumentParser) -> None:
    """Every flag of `gnn-dist train`, each with what it acts on (docs/cli.md is made from these)."""
    p.add_argument("--partition", required=True, help="partition directory from `gnn-dist partition`")
    p.add_argument("--model", default="gcn", metavar="NAME",
                   help="static: gcn | sage | gat | gin; dynamic (a partition of snapshots): evolvegcn | gcrn; "
                        "typed (node and edge types): rgcn | hsage (GraphSAGE per relation, HeteroConv); "
                        "or your own, MODULE:FUNCTION or FILE.py:FUNCTION, where FUNCTION(num_features, "
                        "num_classes, config) returns a model of gnn-dist layers (see examples/custom_layer.py) "
                        "or of PyG's own, wrapped by gd.nn.Distributed (examples/pyg_model.py)")
    p.add_argument("--num-bases", type=int, default=None,
                   help="rgcn: basis matrices shared by the relations (default 2; 0: none)")
    p.add_argument("--relagg", action="store_true",
                   help="rgcn: owners send per-relation partial aggregates instead of raw rows where the "
                        "partitioner found that fewer (relation-aggregation-first)")
    p.add_argument("--task", default="node", choices=["node", "link"],
                   help="node classification (default) or link prediction (partition with --link-split)")
    p.add_argument("--layers", type=int, default=None, help="graph layers (default 2; dynamic models 1)")
    p.add_argument("--hidden", type=int, default=16, help="hidden layers' width (default 16)")
    p.add_argument("--heads", type=int, default=None, help="gat: attention heads of hidden layers (default 8)")
    p.add_argument("--epochs", type=int, default=None, help="default 200 (dynamic models 50)")
    p.add_argument("--lr", type=float, default=0.01, help="the optimiser's learning rate (default 0.01)")
    p.add_argument("--weight-decay", type=float, default=None, help="default 5e-4 (dynamic models 0)")
    p.add_argument("--dropout", type=float, default=0.5,
                   help="dropout on every layer's input in training, keyed by node id (default 0.5)")
    p.add_argument("--optimizer", default="adam", choices=["adam", "sgd"], help="adam (default) or plain sgd")
    p.add_argument("--lr-schedule", default="none", choices=["none", "cosine", "step"],
                   help="per-epoch learning rate: constant, cosine to zero, or x --lr-gamma every --lr-step epochs")
    p.add_argument("--lr-step", type=int, default=50, help="--lr-schedule step: epochs between steps (default 50)")
    p.add_argument("--lr-gamma", type=float, default=0.5,
                   help="--lr-schedule step: the learning rate's factor at each step (default 0.5)")
    p.add_argument("--early-stop", type=int, default=0, metavar="N",
                   help="stop when validation accuracy has not improved for N evaluations; keeps the best weights")
    p.add_argument("--keep-best", action="store_true",
                   help="end with the weights of the best validation epoch (also written to CHECKPOINT_DIR/best.pt)")
    p.add_argument("--seed", type=int, default=0, help="model and dropout seed (rank 0's value is used everywhere)")
    p.add_argument("--normalize-features", action="store_true", help="row-normalise input features")
    p.add_argument("--embedding-dim", type=int, default=None, metavar="D",
                   help="nodes without features (a graph, or a node type, that has none) get a learnable "
                        "D-wide input row each, held by the node's owner (default: --hidden)")
    add_exchange_flags(p)
    p.add_argument("--no-input-cache", action="store_true",
                   help="send the input features' halo every epoch instead of once (input dropout is keyed by "
                        "node id either way, so results are identical; for measuring)")
    p.add_argument("--no-overlap", action="store_true", help="wait for halo rows before any aggregation")
    cost_report.add_machine_flag(p, "the cost model's prediction of the epoch, written to --log")
    add_loop_flags(p)
    add_dynamic_flags(p)
    add_launch_flags(p)
    p.add_argument("--no-verify", action="store_true", help="skip checksum verification of the partition files")
    p.add_argument("--memory-report", action="store_true",
                   help="after the first epoch, print each rank's memory by what holds it: features, graph and "
                        "operators, halo buffers, activations, parameters, optimizer state, runtime (static and "
                        "typed graphs)")
    progress.add_flag(p)
    p.add_argument("--debug", action="store_true", help="an error in model code prints its whole traceback")


def add_loop_flags(p) -> None:
    """What the training loop does each epoch besides training: evaluate, log, checkpoint, save."""
    p.add_argument("--eval-every", type=int, default=1, help="evaluate every N epochs (0: only at the end)")
    p.add_argument("--log", default=None, help="append per-epoch metrics as JSON lines to this file (rank 0)")
    p.add_argument("--checkpoint-dir", default=None, help="where checkpoint.pt is written (rank 0, atomically)")
    p.add_argument("--checkpoint-every", type=int, default=0, help="checkpoint every K epochs (0: never)")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint-dir/checkpoint.pt if present")
    p.add_argument("--plot", default=None, metavar="PNG", help="write loss and accuracy (or MSE) curves here (rank 0)")
    p.add_argument("--tensorboard", default=None, metavar="DIR",
                   help="also write TensorBoard scalars here (rank 0; needs the tensorboard package)")
    p.add_argument("--save-model", default=None, metavar="M.pt",
                   help="write the trained model here (rank 0, atomically): its weights, every rank's learnable rows, "
                        "and the model flags that rebuild it (for predict and gd.load_model)")


def add_dynamic_flags(p: argparse.ArgumentParser) -> None:
    """Snapshot sequences: windows, snapshot groups and how snapshot plans are derived."""
    p.add_argument("--window", type=int, default=8,
                   help="dynamic models: snapshots per truncated-backpropagation window (default 8)")
    p.add_argument("--snapshot-group", type=int, default=0, metavar="G",
                   help="dynamic models: snapshots per block-diagonal group, whose convolutions that do not read "
                        "the last state share one exchange (0, default: as many as fit 65536 local rows; training "
                        "groups stop at window ends)")
    p.add_argument("--plans", default="incremental", choices=["incremental", "rebuild"],
                   help="dynamic graphs: apply stored per-snapshot differences, or rebuild each snapshot's plan "
                        "and agree it with the peers (default incremental)")
    p.add_argument("--no-plan-cache", action="store_true",
                   help="dynamic graphs: re-derive snapshot plans every pass instead of keeping them all in memory")


def check_outputs(a: argparse.Namespace) -> None:
    """Where the run writes (--save-model, --plot, --log: files; --checkpoint-dir: a folder; --tensorboard's
    package), checked on every rank before it trains, in one line: a file in the way of its folder, a link to
    nothing, a folder where a file goes, a file or an existing folder not writable. Why: found when first
    written, a trained model was lost at the end of the run. A missing folder is made when written, so a rank
    on another host, without the folder, checks nothing it would not make."""
    from partition.errors import MissingExtraError, UsageError

    if a.tensorboard:
        import importlib.util

        if importlib.util.find_spec("tensorboard") is None:
            raise MissingExtraError("--tensorboard", "tensorboard", "tensorboard")
    for flag, value, folder in (("--save-model", a.save_model, False), ("--plot", a.plot, False),
                                ("--log", a.log, False), ("--checkpoint-dir", a.checkpoint_dir, True)):
        if not value:
            continue
        path = Path(value)
        if path.exists() and path.is_dir() != folder:
            raise UsageError(f"{flag} {value} is a {'file' if folder else 'folder'}: give a "
                             f"{'folder' if folder else 'file'} to write")
        if path.exists() and not folder and not os.access(path, os.W_OK):
            raise UsageError(f"{flag} {value} cannot be written (a read-only file)")
        where = path if folder else path.parent
        for q in (where, *where.parents):
            if q.is_symlink() and not q.exists():
                raise UsageError(f"{flag} {value}: {q} is a link to nothing")
            if q.exists():
                if not q.is_dir():
                    raise UsageError(f"{flag} {value}: {q} is a file, not a folder")
                if q == where and not os.access(q, os.W_OK | os.X_OK):
                    raise UsageError(f"{flag} {value}: the folder {q} is not writable")
                break
