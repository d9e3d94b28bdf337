"""`pyg:<DatasetClass>[:<name>][?target=TYPE&split=..]`: any torch_geometric data set whose raw files are on disk.

The class is constructed over `--data-dir ROOT` (default: the data roots of `gnn_dist.data.paths`) exactly
as a PyG user would, except that it may never download: where a raw file is missing, the first one is
named with its folder in one line. PyG writes its processed copy beside the raw files, as it always
does. A homogeneous data set becomes a `Graph`; a `HeteroData` becomes a typed graph, whose target is
the one node type with labels (or `?target=`). Masks are kept where the data set has them (PyG's split
index `split_idx` too: a mask per split); elsewhere a seeded split is drawn, with a note.
"""
from __future__ import annotations

import inspect
import os
from pathlib import Path

from gnn_dist.data.options import masks_or_split, number, split_spec
from gnn_dist.data.paths import data_dirs
from partition.errors import DataError, UsageError
from partition.graph import Graph
from partition.typed import TypedGraph

OPTIONS = ("target", "split", "seed", "val")


def _dataset_class(name: str):
    import torch_geometric.datasets as datasets

    cls = getattr(datasets, name, None)
    if not inspect.isclass(cls):
        raise UsageError(f"torch_geometric.datasets has no data set class '{name}' (e.g. pyg:Planetoid:CiteSeer, "
                         f"pyg:Amazon:Computers, pyg:Reddit, pyg:IMDB)")

    def refuse_download(self) -> None:
        missing = [p for p in self.raw_paths if not os.path.exists(p)]
        raise DataError(f"pyg:{name}: raw file {Path(missing[0]).name if missing else '?'} is missing from "
                        f"{self.raw_dir} (put the data set's raw files there, or point --data-dir at their root; "
                        f"gnn-dist never downloads)")

    return type(cls.__name__, (cls,), {"download": refuse_download, "__module__": cls.__module__})


def _root(data_dir: str | None) -> Path:
    """--data-dir as given, else the `pyg/` folder of the first data root that has one (or of the first root)."""
    if data_dir:
        return Path(data_dir)
    roots = data_dirs(None)
    return next((r / "pyg" for r in roots if (r / "pyg").is_dir()), roots[0] / "pyg")


def load_pyg(rest: str, data_dir: str | None = None, seed: int = 0, spec: str | None = None) -> Graph | TypedGraph:
    spec = spec or f"pyg:{rest}"
    body, options = split_spec(rest, spec, OPTIONS)
    cls_name, _, ds_name = body.partition(":")
    cls = _dataset_class(cls_name)
    root = _root(data_dir)
    kwargs = {"name": ds_name} if ds_name else {}
    try:
        ds = cls(str(root), **kwargs)
    except DataError:
        raise
    except TypeError as e:
        raise UsageError(f"pyg:{body}: {cls_name} takes {'no name' if ds_name else 'a name'} here ({e})") from None
    except (OSError, ValueError, RuntimeError) as e:
        raise DataError(f"pyg:{body}: reading {root} failed: {str(e).splitlines()[0]}") from None
    data, seed = ds[0], number(options, "seed", spec, int, seed)
    label = f"pyg:{body}"
    if hasattr(data, "node_types"):
        from gnn_dist.data.typed import from_pyg

        target = options.get("target") or _labelled_type(data, label)
        hg = from_pyg(data, target, name=(ds_name or cls_name).lower(), seed=seed)
        if "split" in options:
            hg.train_mask, hg.val_mask, hg.test_mask = masks_or_split(None, hg.y, label, options["split"], seed,
                                                                    number(options, "val", spec, int, 30))
        return hg
    return _homogeneous(data, ds, label, options, seed, spec)


def _labelled_type(data, label: str) -> str:
    typed = [t for t in data.node_types if "y" in data[t]]
    if len(typed) != 1:
        raise UsageError(f"{label}: {len(typed)} node types have labels ({', '.join(typed) or 'none'}); name the "
                         f"target with ?target=TYPE")
    return typed[0]


def _homogeneous(data, ds, label: str, options: dict, seed: int, spec: str) -> Graph:
    from gnn_dist.data.real import graph_from_pyg

    if getattr(data, "x", None) is None:
        raise DataError(f"{label} has no node features (x)")
    g = graph_from_pyg(data, label.split(":", 1)[1].lower(), int(getattr(ds, "num_classes", 0)))
    if g.train_mask.ndim > 1:  # PyG keeps several splits as columns (e.g. WikiCS): use the first
        g.train_mask, g.val_mask, g.test_mask = (m[:, 0] for m in (g.train_mask, g.val_mask, g.test_mask))
    stored = (g.train_mask, g.val_mask, g.test_mask)
    g.train_mask, g.val_mask, g.test_mask = masks_or_split(
        stored if any(m.any() for m in stored) else None, g.y, label, options.get("split"), seed,
        number(options, "val", spec, int, 30), spec)
    g.validate()
    return g
