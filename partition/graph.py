"""The torch-free graph container every loader produces and the partitioner consumes."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from partition.errors import DataError, UsageError


@dataclass
class Graph:
    """A directed graph stored by destination: row ``v`` of the CSR lists v's in-neighbours.

    Storing in-edges by destination is what message passing reads (a node
    aggregates from its sources), and it is the layout of every local part.
    Edge ``e`` goes ``indices[e] -> row(e)``, the PyG ``edge_index`` convention
    ``(source, target)``.
    """

    indptr: np.ndarray  # int64 [N + 1]
    indices: np.ndarray  # int64 [E], source node of each in-edge
    x: np.ndarray  # float32 [N, F]
    y: np.ndarray  # int64 [N]; -1 marks an unlabelled node
    train_mask: np.ndarray  # bool [N]
    val_mask: np.ndarray
    test_mask: np.ndarray
    edge_weight: np.ndarray | None = None  # float32 [E] or None (all ones)
    name: str = "graph"
    num_classes: int = field(default=0)
    edge_type: np.ndarray | None = None  # int64 [E]: relation of each edge (typed graphs)
    node_type: np.ndarray | None = None  # int64 [N]: type of each node (typed graphs)
    edge_attr: np.ndarray | None = None  # float32 [E, D]: edge features, CSR order
    metric: str | None = None  # what its users report, where not the default (accuracy; micro-F1 if multi-label)
    original_ids: np.ndarray | None = None  # int64 [N]: each node's id in the input, where a loader compacted them

    def __post_init__(self) -> None:
        self.indptr = np.ascontiguousarray(self.indptr, dtype=np.int64)
        self.indices = np.ascontiguousarray(self.indices, dtype=np.int64)
        self.x = np.ascontiguousarray(self.x, dtype=np.float32)
        # one class per node (int64, -1 = no label), or multi-label targets: (N, C) of 0/1 (float32)
        check_integral_labels(f"graph {self.name}", self.y)
        self.y = np.ascontiguousarray(self.y, dtype=np.float32 if np.ndim(self.y) == 2 else np.int64)
        for m in ("train_mask", "val_mask", "test_mask"):
            setattr(self, m, np.ascontiguousarray(getattr(self, m), dtype=bool))
        if self.edge_weight is not None:
            self.edge_weight = np.ascontiguousarray(self.edge_weight, dtype=np.float32)
        if self.edge_attr is not None:
            self.edge_attr = np.ascontiguousarray(self.edge_attr, dtype=np.float32)
            if self.edge_attr.ndim == 1:
                self.edge_attr = self.edge_attr[:, None]
        self.classes_given = bool(self.num_classes)  # else counted from the labels: a stray label is then a class
        if not self.num_classes:
            self.num_classes = self.y.shape[1] if self.multilabel else int(self.y.max()) + 1 if self.y.size else 0
        self.validate()

    # ----------------------------------------------------------------- shape
    @property
    def multilabel(self) -> bool:
        """Several labels per node (Yelp, AmazonProducts, ogbn-proteins): y is (N, C) of 0/1."""
        return self.y.ndim == 2

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    def edge_index(self) -> tuple[np.ndarray, np.ndarray]:
        """(source, target) arrays in CSR order."""
        dst = np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(self.indptr))
        return self.indices, dst

    def weights(self) -> np.ndarray:
        if self.edge_weight is None:
            return np.ones(self.num_edges, dtype=np.float32)
        return self.edge_weight

    def in_degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    def out_degree(self) -> np.ndarray:
        return np.bincount(self.indices, minlength=self.num_nodes).astype(np.int64)

    def weighted_in_degree(self) -> np.ndarray:
        dst = np.repeat(np.arange(self.num_nodes), np.diff(self.indptr))
        return np.bincount(dst, weights=self.weights(), minlength=self.num_nodes).astype(np.float64)

    # ------------------------------------------------------------ building
    @classmethod
    def from_edges(
        cls,
        src: np.ndarray,
        dst: np.ndarray,
        num_nodes: int,
        x: np.ndarray,
        y: np.ndarray,
        train_mask: np.ndarray,
        val_mask: np.ndarray,
        test_mask: np.ndarray,
        edge_weight: np.ndarray | None = None,
        name: str = "graph",
        num_classes: int = 0,
        edge_type: np.ndarray | None = None,
        node_type: np.ndarray | None = None,
        edge_attr: np.ndarray | None = None,
        original_ids: np.ndarray | None = None,
    ) -> "Graph":
        """Build from an edge list; rejects out-of-range ids before anything is sorted."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        if src.shape != dst.shape or src.ndim != 1:
            raise DataError(f"edge list: source and target arrays differ in shape {src.shape} vs {dst.shape}")
        _check_ids(src, num_nodes, "edge source")
        _check_ids(dst, num_nodes, "edge target")
        order = np.lexsort((src, dst))
        indptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=num_nodes), out=indptr[1:])
        ew = None if edge_weight is None else np.asarray(edge_weight, dtype=np.float32)[order]
        et = None if edge_type is None else np.asarray(edge_type, dtype=np.int64)[order]
        ea = None if edge_attr is None else np.asarray(edge_attr, dtype=np.float32)[order]
        return cls(indptr, src[order], x, y, train_mask, val_mask, test_mask, ew, name, num_classes, et, node_type, ea,
                   original_ids=original_ids)

    # ---------------------------------------------------------- validation
    def validate(self) -> None:
        """Fail with one line naming the first problem: bad data must not reach a partition."""
        n = self.num_nodes
        if self.indptr.ndim != 1 or n < 0 or self.indptr[0] != 0:
            raise UsageError(f"graph {self.name}: indptr must be 1-D and start at 0")
        if np.any(np.diff(self.indptr) < 0) or self.indptr[-1] != self.indices.shape[0]:
            raise DataError(f"graph {self.name}: indptr is not monotone or does not end at the edge count")
        _check_ids(self.indices, n, f"graph {self.name}: edge source")
        if self.x.ndim != 2 or self.x.shape[0] != n:
            raise DataError(f"graph {self.name}: features have shape {self.x.shape}, expected ({n}, F)")
        bad = first_nonfinite_row(self.x)
        if bad is not None:
            raise DataError(f"graph {self.name}: features contain NaN or inf (first at node {bad})")
        if self.multilabel:
            if self.y.shape != (n, self.num_classes) or not np.isin(self.y, (0.0, 1.0)).all():
                raise DataError(f"graph {self.name}: multi-label targets must be ({n}, C) of 0 and 1, got shape "
                                f"{self.y.shape}")
        elif self.y.shape != (n,):
            raise DataError(f"graph {self.name}: labels have shape {self.y.shape}, expected ({n},) or ({n}, C)")
        for m in ("train_mask", "val_mask", "test_mask"):
            if getattr(self, m).shape != (n,):
                raise DataError(f"graph {self.name}: {m} has shape {getattr(self, m).shape}, expected ({n},)")
        if not self.multilabel:
            check_labels(f"graph {self.name}", self.y, self.num_classes, self.classes_given,
                         (self.train_mask, self.val_mask, self.test_mask))
        if self.edge_weight is not None:
            if self.edge_weight.shape != self.indices.shape:
                raise DataError(f"graph {self.name}: edge_weight has {self.edge_weight.shape[0]} entries "
                                     f"for {self.num_edges} edges")
            if not np.isfinite(self.edge_weight).all():
                raise DataError(f"graph {self.name}: edge weights contain NaN or inf")
        if self.edge_attr is not None:
            if self.edge_attr.ndim != 2 or self.edge_attr.shape[0] != self.num_edges:
                raise DataError(f"graph {self.name}: edge_attr has shape {self.edge_attr.shape}, "
                                     f"expected ({self.num_edges}, D)")
            if not np.isfinite(self.edge_attr).all():
                raise DataError(f"graph {self.name}: edge features contain NaN or inf")
        if self.edge_type is not None and self.edge_type.shape != self.indices.shape:
            raise DataError(f"graph {self.name}: edge_type has {self.edge_type.shape[0]} entries for {self.num_edges} edges")
        if self.node_type is not None and self.node_type.shape != (n,):
            raise DataError(f"graph {self.name}: node_type has {self.node_type.shape[0]} entries for {n} nodes")
        if self.original_ids is not None and np.shape(self.original_ids) != (n,):
            raise DataError(f"graph {self.name}: {np.shape(self.original_ids)} original ids for {n} nodes")


def check_integral_labels(what: str, y) -> None:
    """Classes stored as floats (1.0) are read as integers; a fraction or NaN would be truncated silently."""
    y = np.asarray(y)
    if y.ndim == 1 and np.issubdtype(y.dtype, np.floating):
        bad = ~np.isfinite(y) | (y != np.floor(y))
        if bad.any():
            raise DataError(f"{what}: label {y[bad][0]} at node {int(np.argmax(bad))} is not a class "
                            f"number (an integer, or -1 for a node without a label)")


def check_labels(what: str, y: np.ndarray, num_classes: int, given: bool, masks) -> None:
    """One class per node in [0, num_classes), or -1 for a node without a label, which no mask may hold.

    A label beyond the classes fails training with an index error, and -1 in the train mask too; -1 in
    val or test would count as a wrong answer. When the class count is not `given` but counted from the
    labels, a stray label (99 among 0..6) would silently become class 99: labels that leave more than
    half of the classes 0..max without a node are refused as such (a file may give num_classes)."""
    if not y.size:
        return
    lo, hi = int(y.min()), int(y.max())
    if lo < -1:
        raise DataError(f"{what}: label {lo} at node {int(np.argmax(y == lo))} is negative (-1 marks a node "
                        f"without a label)")
    if num_classes and hi >= num_classes:
        raise DataError(f"{what}: label {hi} at node {int(np.argmax(y == hi))} is out of range for {num_classes} "
                        f"classes")
    for name, m in zip(("train", "val", "test"), masks):
        bad = np.asarray(m, bool) & (y < 0)
        if bad.any():
            raise DataError(f"{what}: node {int(np.argmax(bad))} is in the {name} mask but has no label (-1)")
    used = np.unique(y[y >= 0]).shape[0]
    if not given and 2 * used < num_classes:
        raise DataError(f"{what}: label {hi} at node {int(np.argmax(y == hi))} makes {num_classes} classes, of "
                        f"which only {used} have a node (an out-of-range label? a file may state num_classes)")


def first_nonfinite_row(x: np.ndarray, block_rows: int = 1 << 16) -> int | None:
    """The first row holding NaN or inf, checked a block at a time: a memory-mapped matrix is never copied."""
    for start in range(0, x.shape[0], block_rows):
        bad = ~np.isfinite(x[start: start + block_rows]).all(axis=tuple(range(1, x.ndim)))
        if bad.any():
            return start + int(np.argmax(bad))
    return None


def _check_ids(ids: np.ndarray, num_nodes: int, what: str) -> None:
    if ids.size == 0:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0:
        raise DataError(f"{what} id {lo} is negative")
    if hi >= num_nodes:
        raise DataError(f"{what} id {hi} is out of range for {num_nodes} nodes")


def concat_ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenate arange(s, s + c) for every (s, c) without a Python loop."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return np.arange(total, dtype=np.int64) + offsets
