"""The node ids an edge list uses, gathered chunk by chunk without allocating by the largest id.

A counter per id up to the largest (dense) suits a compact edge list, but one stray id of 2^31 would
make it 2^31 counters (16 GB), and real edge lists often hold sparse ids (user ids, hashes). So ids
are held densely only while the largest stays within twice the ids read so far (below `DENSE_FLOOR`
they always are); beyond that they are held sparsely, as the sorted distinct ids and the in-degree of
each. After the first pass over the chunks, `needs_relabel` says whether the ids must be compacted to
0..n-1 (`edges:PATH?relabel=`, docs/datasets.md), and `mapper` maps a chunk's ids to the compact ones.
"""
from __future__ import annotations

import numpy as np

DENSE_FLOOR = 1 << 20  # ids below this are always counted densely: 9 MB at most


class NodeIds:
    """Distinct ids and in-degrees of an edge list; `declared` is a node count the user gave (`?nodes=`)."""

    def __init__(self, declared: int | None = None):
        self.declared = declared or 0
        self.deg: np.ndarray | None = np.zeros(self.declared, np.int64)  # dense: in-degree of every id < len
        self.seen: np.ndarray | None = np.zeros(self.declared, bool)  # dense: ids that occur
        self.ids: np.ndarray | None = None  # sparse: sorted distinct ids
        self.counts: np.ndarray | None = None  # sparse: in-degree of each
        self.entries = 0  # ids read so far (two per edge)
        self.top = 0  # largest id + 1

    @property
    def dense(self) -> bool:
        return self.ids is None

    def add(self, src: np.ndarray, dst: np.ndarray) -> None:
        if not src.size:
            return
        self.entries += 2 * src.size
        self.top = max(self.top, int(max(src.max(), dst.max())) + 1)
        if self.dense and self.top > max(DENSE_FLOOR, 2 * self.entries, self.declared):
            self.ids = np.flatnonzero(self.seen)
            self.counts, self.deg, self.seen = self.deg[self.ids], None, None
        if self.dense:
            if self.top > self.deg.shape[0]:
                grow = self.top - self.deg.shape[0]
                self.deg = np.concatenate([self.deg, np.zeros(grow, np.int64)])
                self.seen = np.concatenate([self.seen, np.zeros(grow, bool)])
            self.seen[src] = True
            self.seen[dst] = True
            self.deg += np.bincount(dst, minlength=self.deg.shape[0])
            return
        merged = np.unique(np.concatenate([self.ids, src, dst]))
        counts = np.zeros(merged.shape[0], np.int64)
        counts[np.searchsorted(merged, self.ids)] = self.counts
        d, c = np.unique(dst, return_counts=True)
        counts[np.searchsorted(merged, d)] += c
        self.ids, self.counts = merged, counts

    @property
    def distinct(self) -> int:
        return int(self.seen.sum()) if self.dense else int(self.ids.shape[0])

    @property
    def needs_relabel(self) -> bool:
        """Allocating by the largest id would exceed the declared node count, or else twice the distinct ids."""
        return self.top > (self.declared or 2 * self.distinct)

    def original_ids(self) -> np.ndarray:
        """The distinct ids, ascending: compact id i stands for original id `original_ids()[i]`."""
        return np.flatnonzero(self.seen) if self.dense else self.ids

    def in_degree(self, relabel: bool) -> np.ndarray:
        """In-degree of every node: by compact id when relabelling, else of ids 0..max(declared, top)-1."""
        if not relabel:
            if self.dense:
                return self.deg
            # counted sparsely (an early chunk's large id) but dense enough by the end: top <= 2 * distinct
            deg = np.zeros(max(self.top, self.declared), np.int64)
            deg[self.ids] = self.counts
            return deg
        return self.deg[self.seen] if self.dense else self.counts

    def mapper(self):
        """A function from original ids to compact ids (a lookup table while dense, a binary search else)."""
        ids = self.original_ids()
        if self.dense:
            table = np.full(self.deg.shape[0], -1, np.int64)
            table[ids] = np.arange(ids.shape[0])
            return lambda a: table[a]
        return lambda a: np.searchsorted(ids, a)
