"""Graphs in `.npz` files, `file:PATH[?options]`: the project's own layout and the gnn-benchmark layout.

The project's layout: `edge_index` (2, E) or `src`/`dst`, `x`, `y`; optional `train_mask`/`val_mask`/
`test_mask`, `edge_weight`, `edge_attr` (E, D), `num_nodes`, `num_classes` (else the largest label + 1).

The gnn-benchmark layout of Shchur et al. (what PyG's Amazon, Coauthor and CitationFull ship): scipy
CSR pieces `adj_data/adj_indices/adj_indptr/adj_shape` and `attr_*` (or dense `adj_matrix`,
`attr_matrix`), `labels`. It is read as PyG's `read_npz` reads it: self loops dropped, edges made
undirected, features binarised (`binary=false` keeps their values). Told apart by its keys.

Options (grammar in `gnn_dist.data.options`): `lcc=true` keeps the largest connected component;
`split=20` or `split=0.6,0.2` (with `val=`, `seed=`) draws a seeded split. A file without masks gets a
seeded 60/20/20 split and a note saying so: never the same nodes in train and test.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from gnn_dist.data.options import flag, largest_component, masks_or_split, number, split_spec
from partition.errors import DataError
from partition.graph import Graph

OPTIONS = ("lcc", "split", "val", "seed", "binary")
BENCHMARK_KEYS = ("adj_data", "adj_matrix")


def load_npz(rest: str, seed: int = 0, spec: str | None = None) -> Graph:
    spec = spec or f"file:{rest}"
    path, options = split_spec(rest, spec, OPTIONS)
    f = Path(path)
    if not f.is_file():
        raise DataError(f"graph file {f} does not exist")
    with open(f, "rb") as head:
        magic = head.read(4)
    if magic and magic != b"PK\x03\x04":  # np.load would read text as pickled data, and a .npy as one array
        raise DataError(f"graph file {f} is not an .npz archive (file: reads the project's or gnn-benchmark's npz "
                        f"layout; an edge list is edges:{f}, docs/datasets.md)")
    try:
        z = np.load(f, allow_pickle=False)
        files = set(z.files)
    except EOFError:
        raise DataError(f"graph file {f} is empty") from None
    except (OSError, ValueError) as e:
        raise DataError(f"graph file {f} cannot be read: {str(e).splitlines()[0]}") from None
    try:
        if files & set(BENCHMARK_KEYS):
            src, dst, x, y, masks, extra = _benchmark(z, f, flag(options, "binary", spec, True))
        else:
            src, dst, x, y, masks, extra = _own(z, f)
    except KeyError as e:
        raise DataError(f"graph file {f} lacks the array {e}") from None
    n = x.shape[0]
    if flag(options, "lcc", spec):
        keep = largest_component(src, dst, n)
        src, dst, x, y, masks, extra = _subgraph(keep, src, dst, x, y, masks, extra, n)
        n = keep.shape[0]
    masks = masks_or_split(masks, y, f.name, options.get("split"), number(options, "seed", spec, int, seed),
                           number(options, "val", spec, int, 30), spec)
    classes = int(z["num_classes"]) if "num_classes" in files else 0  # else counted from the labels
    return Graph.from_edges(src, dst, n, x, y, *masks, name=f.stem, num_classes=classes, **extra)


def _own(z, f: Path):
    """The project's layout."""
    if "edge_index" in z.files:
        src, dst = z["edge_index"]
    elif "src" in z.files and "dst" in z.files:
        src, dst = z["src"], z["dst"]
    else:
        raise DataError(f"graph file {f} has neither 'edge_index' nor 'src'/'dst' (nor the gnn-benchmark "
                        f"'adj_data' arrays)")
    x, y = z["x"], z["y"]
    n = int(z["num_nodes"]) if "num_nodes" in z.files else x.shape[0]
    masks = None
    if "train_mask" in z.files:
        masks = tuple(z[m] if m in z.files else np.zeros(n, bool) for m in ("train_mask", "val_mask", "test_mask"))
    extra = {"edge_weight": z["edge_weight"] if "edge_weight" in z.files else None,
             "edge_attr": z["edge_attr"] if "edge_attr" in z.files else None}
    return np.asarray(src), np.asarray(dst), x, y, masks, extra


def _csr(z, prefix: str) -> sp.csr_matrix | None:
    if f"{prefix}_matrix" in z.files:
        return sp.csr_matrix(z[f"{prefix}_matrix"])
    if f"{prefix}_data" not in z.files:
        return None
    return sp.csr_matrix((z[f"{prefix}_data"], z[f"{prefix}_indices"], z[f"{prefix}_indptr"]),
                         shape=tuple(z[f"{prefix}_shape"]))


def _benchmark(z, f: Path, binary: bool):
    """Shchur et al.'s layout, as PyG's read_npz reads it."""
    adj, attr = _csr(z, "adj"), _csr(z, "attr")
    if "labels" not in z.files:
        raise DataError(f"graph file {f}: gnn-benchmark layout without 'labels' (multi-label 'labels_data' "
                        f"is not read yet)")
    y = np.asarray(z["labels"]).astype(np.int64)
    n = adj.shape[0]
    if attr is None:
        raise DataError(f"graph file {f}: gnn-benchmark layout without node attributes ('attr_data')")
    if attr.shape[0] != n or y.shape[0] != n:
        raise DataError(f"graph file {f}: {n} nodes in adj_shape, but {attr.shape[0]} attribute rows and "
                        f"{y.shape[0]} labels")
    x = attr.toarray().astype(np.float32)
    if binary:
        x[x > 0] = 1.0
    coo = adj.tocoo()
    keep = coo.row != coo.col
    und = sp.coo_matrix((np.ones(int(keep.sum()), np.int8), (coo.row[keep], coo.col[keep])), shape=(n, n))
    und = (und + und.T).tocoo()  # undirected, duplicates merged
    return und.row.astype(np.int64), und.col.astype(np.int64), x, y, None, {}


def _subgraph(keep: np.ndarray, src, dst, x, y, masks, extra: dict, n: int):
    """Restrict to the nodes `keep` (ascending), renumbered 0..len(keep)-1."""
    new = np.full(n, -1, np.int64)
    new[keep] = np.arange(keep.shape[0])
    e = (new[src] >= 0) & (new[dst] >= 0)
    extra = {k: (None if v is None else v[e]) for k, v in extra.items()}
    masks = None if masks is None else tuple(m[keep] for m in masks)
    return new[src[e]], new[dst[e]], x[keep], y[keep], masks, extra
