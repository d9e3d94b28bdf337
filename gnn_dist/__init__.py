"""gnn-dist: distributed full-graph GNN training over METIS partitions with halo exchange.

    import gnn_dist as gd
    with gd.init() as ctx:                           # MPI / torchrun -> torch.distributed; closes at exit
        part = gd.load_partition("out/cora-4", ctx)  # this rank's LocalPart (a LocalGraph with x, y, masks)
        model = gd.nn.build_model("gcn", part.num_features, 16, part.num_classes)
        gd.Trainer(model, part, ctx).fit(epochs=200)

Layers subclass `gd.nn.MessagePassing`; `dir(gd)` and `dir(gd.nn)` list the public API.
"""
import importlib
import importlib.util
from pathlib import Path

__version__ = "0.1.0"


def _check_partitioner() -> None:
    """gnn-dist's torch-free partitioner is the top-level package `partition`, installed beside this one. Another
    package of that name earlier on the path (a folder in the working directory, another distribution) would be
    imported instead and fail far from the cause: found here, at import, in one line."""
    ours = Path(__file__).resolve().parent.parent / "partition"
    spec = importlib.util.find_spec("partition")
    where = None if spec is None else spec.origin and Path(spec.origin).parent or next(
        iter(spec.submodule_search_locations or []), None)  # a folder without __init__.py has no origin
    found = Path(where).resolve() if where else None
    if found != ours:
        raise ImportError(f"gnn-dist's partitioner is the package 'partition' at {ours}, but 'partition' is "
                          f"{found or 'not importable'}: another package of that name shadows it (rename or "
                          f"uninstall it, or run from another folder)")
    init = ours / "__init__.py"
    if 'PARTITIONER_OF = "gnn-dist"' not in (init.read_text(errors="replace") if init.is_file() else ""):
        raise ImportError(f"{init} is not gnn-dist's partitioner: another distribution installed a package "
                          f"'partition' over it (reinstall gnn-dist, and rename or uninstall the other)")


_check_partitioner()
# Loaded on first use, so the partitioning commands (numpy, scipy, pymetis) never import torch.
_EXPORTS = {
    "LocalGraph": "gnn_dist.graph.local", "DistContext": "gnn_dist.runtime.launch", "init": "gnn_dist.runtime.launch",
    "load_partition": "gnn_dist.graph.load", "Trainer": "gnn_dist.train.node", "load_typed_partition": "gnn_dist.graph.typed",
    "local_typed": "gnn_dist.graph.typed", "SnapshotSequence": "gnn_dist.graph.dynamic",
    "DynamicTrainer": "gnn_dist.train.dynamic", "LinkTrainer": "gnn_dist.train.link",
    "ExchangeConfig": "gnn_dist.runtime.exchange", "ModelConfig": "gnn_dist.nn.registry",
    "UsageError": "gnn_dist.errors", "LaunchError": "gnn_dist.errors", "load_model": "gnn_dist.cli.model_file",
    "save_model": "gnn_dist.cli.model_file",
}
__all__ = ["nn", *_EXPORTS]


def __dir__() -> list[str]:
    return sorted(__all__ + ["__version__"])


def __getattr__(name: str):
    if name == "nn":
        return importlib.import_module("gnn_dist.nn")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'gnn_dist' has no attribute '{name}'")
