"""A dynamic graph: a sequence of snapshots over one node set (docs/design.md §8).

Node ids are shared by every snapshot, so a node's recurrent state has one
home for the whole sequence. Edges (and their weights) may change from one
snapshot to the next; features and targets are given per snapshot.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from partition.errors import DataError, UsageError
from partition.graph import Graph, _check_ids


@dataclass
class Snapshot:
    src: np.ndarray  # int64 [E_t]
    dst: np.ndarray  # int64 [E_t]
    weight: np.ndarray  # float32 [E_t]


@dataclass
class Snapshots:
    """T snapshots, N nodes: edges per snapshot, x [T, N, F], y [T, N].

    `task` is "regression" (y float) or "classification" (y int, -1 = no label).
    The first `num_train` snapshots train; the rest are the test period.
    """

    snapshots: list[Snapshot]
    x: np.ndarray
    y: np.ndarray
    task: str = "regression"
    name: str = "snapshots"
    num_classes: int = 0
    num_train: int = 0

    def __post_init__(self) -> None:
        self.x = np.ascontiguousarray(self.x, dtype=np.float32)
        self.y = np.ascontiguousarray(self.y, dtype=np.float32 if self.task == "regression" else np.int64)
        if not self.num_train:
            self.num_train = int(0.8 * self.num_snapshots)  # PyG Temporal's temporal_signal_split default
        self.validate()

    @property
    def num_snapshots(self) -> int:
        return len(self.snapshots)

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[1])

    @property
    def num_features(self) -> int:
        return int(self.x.shape[2])

    @classmethod
    def from_lists(cls, edges: list, weights: list | None, x: list, y: list, num_nodes: int, **kw) -> "Snapshots":
        """Build from per-snapshot lists; every id and shape is checked before anything is stacked."""
        if len(edges) == 0:
            raise DataError("the snapshot sequence is empty")
        if not (len(edges) == len(x) == len(y)) or (weights is not None and len(weights) != len(edges)):
            raise UsageError(f"snapshot sequence: {len(edges)} edge lists, {len(x)} feature and {len(y)} target "
                                 "snapshots (they must be equal)")
        snaps = []
        for t, e in enumerate(edges):
            e = np.asarray(e, dtype=np.int64).reshape(-1, 2) if len(e) else np.zeros((0, 2), np.int64)
            _check_ids(e[:, 0], num_nodes, f"snapshot {t}: edge source")
            _check_ids(e[:, 1], num_nodes, f"snapshot {t}: edge target")
            w = np.ones(e.shape[0], np.float32) if weights is None else np.asarray(weights[t], np.float32)
            if w.shape != (e.shape[0],):
                raise DataError(f"snapshot {t}: {w.shape[0]} edge weights for {e.shape[0]} edges")
            snaps.append(Snapshot(e[:, 0].copy(), e[:, 1].copy(), w))
        for t, (xt, yt) in enumerate(zip(x, y)):
            if np.shape(xt)[0] != num_nodes or np.shape(yt)[0] != num_nodes:
                raise DataError(f"snapshot {t} has {np.shape(xt)[0]} feature rows and {np.shape(yt)[0]} targets, "
                                     f"snapshot 0 has {num_nodes} nodes (node counts must not differ)")
        return cls(snaps, np.stack([np.asarray(a, np.float32) for a in x]), np.stack([np.asarray(a) for a in y]), **kw)

    def validate(self) -> None:
        t, n = self.num_snapshots, self.x.shape[1] if self.x.ndim == 3 else -1
        if t == 0:
            raise DataError("the snapshot sequence is empty")
        if self.x.ndim != 3 or self.x.shape[0] != t:
            raise DataError(f"{self.name}: features have shape {self.x.shape}, expected ({t}, N, F)")
        if self.y.shape != (t, n):
            raise DataError(f"{self.name}: targets have shape {self.y.shape}, expected ({t}, {n})")
        if not np.isfinite(self.x).all() or (self.task == "regression" and not np.isfinite(self.y).all()):
            raise DataError(f"{self.name}: features or targets contain NaN or inf")
        if self.task not in ("regression", "classification"):
            raise UsageError(f"{self.name}: task must be regression or classification, got '{self.task}'")
        if self.task == "classification" and not self.num_classes:
            self.num_classes = int(self.y.max()) + 1
        if not 1 <= self.num_train <= t:
            raise DataError(f"{self.name}: {self.num_train} training snapshots of {t}")
        for i, s in enumerate(self.snapshots):
            _check_ids(s.src, n, f"snapshot {i}: edge source")
            _check_ids(s.dst, n, f"snapshot {i}: edge target")
            if not np.isfinite(s.weight).all():
                raise DataError(f"snapshot {i}: edge weights contain NaN or inf")

    def coalesced(self, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Snapshot t's edges with repeats merged (weights summed), sorted by (dst, src)."""
        s = self.snapshots[t]
        n = self.num_nodes
        key, inv = np.unique(s.dst * n + s.src, return_inverse=True)
        w = np.bincount(inv, weights=s.weight, minlength=key.shape[0]).astype(np.float32)
        return key % n, key // n, w

    def union_graph(self) -> Graph:
        """Every edge that appears in any snapshot, weighted by how many snapshots hold it.

        METIS cuts this graph, so an edge present all the time weighs more
        than one seen once, and ownership never changes over time.
        """
        n = self.num_nodes
        keys = np.concatenate([np.unique(s.dst * n + s.src) for s in self.snapshots])
        key, count = np.unique(keys, return_counts=True)
        ones = np.ones(n, bool)
        return Graph.from_edges(key % n, key // n, n, np.zeros((n, 0), np.float32), np.zeros(n, np.int64),
                                ones, ones, ones, edge_weight=count.astype(np.float32), name=self.name)
