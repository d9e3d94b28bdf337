"""Typed graphs: typed nodes with their own feature widths, canonical edge types (docs/design.md §7).

Types are kept in explicit ordered lists, never in dict order: a type's id is
its position in `node_types` / `edge_types`, and that order is written to
partition.json. For partitioning and exchange the graph is type-erased DGL
style: node type t occupies the homogeneous id range [offset_t, offset_t + n_t),
and every edge carries its relation id.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from partition.errors import DataError, UsageError
from partition.graph import Graph, _check_ids, check_integral_labels, check_labels


def parse_edge_type(s: str) -> tuple[str, str, str]:
    """'author:writes:paper' -> ('author', 'writes', 'paper')."""
    parts = s.split(":")
    if len(parts) != 3 or not all(parts):
        raise DataError(f"edge type '{s}' is not of the form src:rel:dst")
    return parts[0], parts[1], parts[2]


def edge_type_str(et: tuple[str, str, str]) -> str:
    return ":".join(et)


@dataclass
class TypedGraph:
    node_types: list[str]
    num_nodes: dict[str, int]
    x: dict[str, np.ndarray]  # node type -> float32 [n_t, F_t]
    edge_types: list[tuple[str, str, str]]
    edges: dict[str, tuple[np.ndarray, np.ndarray]]  # "src:rel:dst" -> (src ids, dst ids), type-local ids
    target: str  # the node type whose labels are learned
    y: np.ndarray  # int64 [n_target], -1 = unlabelled
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    name: str = "hetero"
    num_classes: int = field(default=0)

    def __post_init__(self) -> None:
        check_integral_labels(f"{self.name}: target type '{self.target}'", self.y)
        self.y = np.ascontiguousarray(self.y, dtype=np.int64)
        self.x = {t: np.ascontiguousarray(v, dtype=np.float32) for t, v in self.x.items()}
        self.classes_given = bool(self.num_classes)
        if not self.num_classes and self.y.size:
            self.num_classes = int(self.y.max()) + 1
        self.validate()

    # ------------------------------------------------------------- checks
    def validate(self) -> None:
        if len(set(self.node_types)) != len(self.node_types) or not self.node_types:
            raise UsageError(f"{self.name}: node types must be distinct and non-empty, got {self.node_types}")
        for t in self.node_types:
            if t not in self.num_nodes or t not in self.x:
                raise DataError(f"{self.name}: node type '{t}' has no node count or features")
            x = self.x[t]
            if x.ndim != 2 or x.shape[0] != self.num_nodes[t]:
                raise DataError(f"{self.name}: features of node type '{t}' have shape {x.shape}, "
                                     f"expected ({self.num_nodes[t]}, F) (feature rows must match the node count)")
            if not np.isfinite(x).all():
                raise DataError(f"{self.name}: features of node type '{t}' contain NaN or inf")
        for extra in set(self.x) - set(self.node_types):
            raise UsageError(f"{self.name}: features given for unknown node type '{extra}'")
        if len({edge_type_str(e) for e in self.edge_types}) != len(self.edge_types):
            raise DataError(f"{self.name}: edge types repeat")
        for et in self.edge_types:
            key = edge_type_str(et)
            for end, t in (("source", et[0]), ("target", et[2])):
                if t not in self.node_types:
                    raise DataError(f"edge type '{key}' refers to missing node type '{t}' "
                                         f"(node types: {', '.join(self.node_types)})")
            if key not in self.edges:
                raise DataError(f"{self.name}: edge type '{key}' has no edges array")
            src, dst = self.edges[key]
            _check_ids(np.asarray(src), self.num_nodes[et[0]], f"edge type '{key}': source")
            _check_ids(np.asarray(dst), self.num_nodes[et[2]], f"edge type '{key}': target")
        for extra in set(self.edges) - {edge_type_str(e) for e in self.edge_types}:
            raise UsageError(f"{self.name}: edges given for unknown edge type '{extra}'")
        if self.target not in self.node_types:
            raise DataError(f"{self.name}: target node type '{self.target}' is not one of {', '.join(self.node_types)}")
        n = self.num_nodes[self.target]
        for name in ("y", "train_mask", "val_mask", "test_mask"):
            if np.shape(getattr(self, name)) != (n,):
                raise DataError(f"{self.name}: {name} has shape {np.shape(getattr(self, name))}, expected ({n},)")
        check_labels(f"{self.name}: target type '{self.target}'", self.y, self.num_classes, self.classes_given,
                     (self.train_mask, self.val_mask, self.test_mask))

    # ---------------------------------------------------------- type erasure
    @property
    def offsets(self) -> dict[str, int]:
        out, acc = {}, 0
        for t in self.node_types:
            out[t], acc = acc, acc + self.num_nodes[t]
        return out

    @property
    def total_nodes(self) -> int:
        return sum(self.num_nodes.values())

    def to_homogeneous(self) -> Graph:
        """One Graph over all nodes: node_type and edge_type ids, labels and masks on target rows only.

        Features are left out (x has width 0): each type keeps its own width and
        is stored per type.
        """
        off, n = self.offsets, self.total_nodes
        src, dst, et = [], [], []
        for r, e in enumerate(self.edge_types):
            s, d = self.edges[edge_type_str(e)]
            src.append(np.asarray(s, np.int64) + off[e[0]])
            dst.append(np.asarray(d, np.int64) + off[e[2]])
            et.append(np.full(len(s), r, np.int64))
        cat = lambda a: np.concatenate(a) if a else np.zeros(0, np.int64)
        node_type = np.repeat(np.arange(len(self.node_types)), [self.num_nodes[t] for t in self.node_types])
        y = np.full(n, -1, np.int64)
        masks = [np.zeros(n, bool) for _ in range(3)]
        lo = off[self.target]
        hi = lo + self.num_nodes[self.target]
        y[lo:hi] = self.y
        for m, src_m in zip(masks, (self.train_mask, self.val_mask, self.test_mask)):
            m[lo:hi] = src_m
        return Graph.from_edges(cat(src), cat(dst), n, np.zeros((n, 0), np.float32), y, *masks, name=self.name,
                                num_classes=self.num_classes, edge_type=cat(et), node_type=node_type)

    def meta(self) -> dict:
        return {"node_types": list(self.node_types), "node_counts": [self.num_nodes[t] for t in self.node_types],
                "feature_dims": [int(self.x[t].shape[1]) for t in self.node_types],
                "edge_types": [edge_type_str(e) for e in self.edge_types], "target_type": self.target}
