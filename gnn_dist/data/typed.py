"""Typed graphs: a seeded typed SBM, PyG `HeteroData`, and `.npz` files.

The typed SBM is academic-graph-like: papers (the target type, one class
each), authors and venues (each with a field), joined by `writes`/`cites`/
`published_in` and their reverses. The class signal reaches a paper weakly
through its own features and more strongly through its authors' and
venue's, so a model must pass messages across relations to do well.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from gnn_dist.data.options import masks_or_split, number, split_spec
from partition.errors import DataError, UsageError
from partition.typed import TypedGraph, edge_type_str, parse_edge_type


def hsbm(papers: int = 3000, authors: int = 2000, venues: int = 40, classes: int = 4, cites: float = 4.0,
         writes: float = 3.0, homophily: float = 0.8, paper_features: int = 32, author_features: int = 16,
         venue_features: int = 8, signal: float = 1.0, paper_signal: float = 0.3, seed: int = 0) -> TypedGraph:
    if min(papers, authors, venues) < classes or classes < 2 or not 0 <= homophily <= 1:
        raise DataError("hsbm: every node type needs at least `classes` nodes, classes >= 2, 0 <= homophily <= 1")
    rng = np.random.default_rng(seed)
    y = {"paper": rng.integers(0, classes, papers), "author": rng.integers(0, classes, authors),
         "venue": np.arange(venues) % classes}

    def pick(kind: str, cls: np.ndarray) -> np.ndarray:
        """A node of type `kind`, of class `cls` with probability homophily, else uniform."""
        lab = y[kind]
        order = np.argsort(lab, kind="stable")
        starts = np.searchsorted(lab[order], np.arange(classes + 1))
        size = starts[cls + 1] - starts[cls]
        same = order[starts[cls] + (rng.random(cls.shape[0]) * size).astype(np.int64)]
        return np.where(rng.random(cls.shape[0]) < homophily, same, rng.integers(0, lab.shape[0], cls.shape[0]))

    n_cite, n_write = int(papers * cites), int(papers * writes)
    cite_src = rng.integers(0, papers, n_cite)
    cite_dst = pick("paper", y["paper"][cite_src])
    keep = cite_src != cite_dst
    w_paper = rng.integers(0, papers, n_write)
    w_author = pick("author", y["paper"][w_paper])
    venue = pick("venue", y["paper"])

    def feats(kind: str, width: int, strength: float) -> np.ndarray:
        means = rng.standard_normal((classes, width)).astype(np.float32)
        return (strength * means[y[kind]] + rng.standard_normal((y[kind].shape[0], width))).astype(np.float32)

    x = {"paper": feats("paper", paper_features, paper_signal), "author": feats("author", author_features, signal),
         "venue": feats("venue", venue_features, signal)}
    pa = np.unique(w_author * papers + w_paper)
    a_ids, p_ids = pa // papers, pa % papers
    edges = {
        "author:writes:paper": (a_ids, p_ids),
        "paper:written_by:author": (p_ids, a_ids),
        "paper:cites:paper": (cite_src[keep], cite_dst[keep]),
        "paper:published_in:venue": (np.arange(papers), venue),
        "venue:publishes:paper": (venue, np.arange(papers)),
    }
    perm = rng.permutation(papers)
    masks = [np.zeros(papers, bool) for _ in range(3)]
    cuts = (int(0.6 * papers), int(0.8 * papers))
    masks[0][perm[: cuts[0]]], masks[1][perm[cuts[0]: cuts[1]]], masks[2][perm[cuts[1]:]] = True, True, True
    return TypedGraph(["paper", "author", "venue"], {"paper": papers, "author": authors, "venue": venues}, x,
                       [parse_edge_type(k) for k in edges], edges, "paper", y["paper"], *masks,
                       name=f"hsbm-{papers}", num_classes=classes)


def _features(x, count: int | None) -> np.ndarray:
    """A node type's features; a type without any is width 0, and training gives it learnable rows."""
    return np.zeros((count, 0), np.float32) if x is None else x


def from_pyg(data, target: str, name: str = "typed", seed: int = 0) -> TypedGraph:
    """A PyG `HeteroData`; the `target` node type must hold `y` (masks optional: else a seeded split)."""
    node_types = list(data.node_types)
    if target not in node_types:
        raise UsageError(f"unknown node type '{target}' (node types: {', '.join(node_types)})")
    x = {t: _features(data[t].x.numpy() if getattr(data[t], "x", None) is not None else None, int(data[t].num_nodes))
         for t in node_types}
    edge_types = [tuple(e) for e in data.edge_types]
    edges = {edge_type_str(e): tuple(a.numpy() for a in data[e].edge_index) for e in edge_types}
    masks = [getattr(data[target], m, None) for m in ("train_mask", "val_mask", "test_mask")]
    y = data[target].y.numpy()
    masks = masks_or_split([None if m is None else m.numpy() for m in masks], y, f"HeteroData '{name}'", seed=seed,
                           of=" for its target type")
    return TypedGraph(node_types, {t: int(data[t].num_nodes) for t in node_types}, x, edge_types, edges, target,
                       y, *masks, name=name)


def from_npz(rest: str, seed: int = 0, spec: str | None = None) -> TypedGraph:
    """`hfile:PATH[?split=..&seed=..&val=..&target=..]`. Keys: `node_types`, `edge_types` (src:rel:dst strings),
    `x:<type>` (a type without it has no features: give `num_nodes`, per type in `node_types` order),
    `edge_index:<src:rel:dst>` (2, E), `target`, `y`, optional `train_mask`/`val_mask`/`test_mask` (without
    them: a seeded split, and a note)."""
    spec = spec or f"hfile:{rest}"
    path, options = split_spec(rest, spec, ("split", "seed", "val", "target"))
    path, target = Path(path), options.get("target")
    if not path.is_file():
        raise DataError(f"graph file {path} does not exist")
    try:
        z = np.load(path, allow_pickle=False)
        node_types = [str(t) for t in z["node_types"]]
        edge_types = [parse_edge_type(str(e)) for e in z["edge_types"]]
        target = target or str(z["target"])
        for key in z.files:
            if key.startswith("x:") and key[2:] not in node_types:
                raise UsageError(f"{path}: features for unknown node type '{key[2:]}'")
            if key.startswith("edge_index:") and key[11:] not in {edge_type_str(e) for e in edge_types}:
                raise UsageError(f"{path}: edges for unknown edge type '{key[11:]}'")
        counts = dict(zip(node_types, (int(c) for c in z["num_nodes"]))) if "num_nodes" in z.files else {}
        missing = [t for t in node_types if f"x:{t}" not in z.files and t not in counts]
        if missing:
            raise DataError(f"{path}: node type '{missing[0]}' has no features (x:{missing[0]}) and the file has no "
                            f"num_nodes array to count its nodes")
        x = {t: _features(z[f"x:{t}"] if f"x:{t}" in z.files else None, counts.get(t)) for t in node_types}
        edges = {edge_type_str(e): tuple(z[f"edge_index:{edge_type_str(e)}"]) for e in edge_types
                 if f"edge_index:{edge_type_str(e)}" in z.files}
        if target not in node_types:
            raise UsageError(f"unknown node type '{target}' (node types: {', '.join(node_types)})")
        masks = masks_or_split([z[m] if m in z.files else None for m in ("train_mask", "val_mask", "test_mask")],
                               z["y"], str(path.name), options.get("split"), number(options, "seed", spec, int, seed),
                               number(options, "val", spec, int, 30), spec, of=" for its target type")
        counts = counts or {t: int(x[t].shape[0]) for t in node_types}
        return TypedGraph(node_types, counts, x, edge_types, edges, target, z["y"], *masks, name=path.stem)
    except KeyError as e:
        raise DataError(f"graph file {path} lacks the array {e}") from None
    except EOFError:
        raise DataError(f"graph file {path} is empty") from None
    except (OSError, ValueError) as e:
        raise DataError(f"graph file {path} cannot be read: {e}") from None
