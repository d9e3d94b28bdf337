"""The partition book: the one place that maps node ids between the whole graph and its parts.

global id -> owning part (`node_map.npy`), global id -> local id within the
owner's inner rows, and back; each part's local rows (inner, then halo)
-> global ids; global id -> the input's own id, where the edge-list
loader compacted sparse ids (`original_ids.npy`); and the drawn train/val/test
split, gathered from the parts back into global ids (`split`). Local ids follow the local order of docs/design.md §2 (central,
then marginal, then halo by owner), so local id i is `LocalGraph` row i.

Everything is read through the store's checksums (`verify=False` skips them,
as `--no-verify` does). A rank that has already read its own part hands its
rows over (`adopt`), so the runtime and the book hold one copy.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from partition.errors import DataError
from partition.store import ORIGINAL_IDS_FILE, read_local_ids, read_masks, read_meta, read_node_map, read_root_file

SPLIT_KEYS = ("train_mask", "val_mask", "test_mask")


class PartitionBook:
    def __init__(self, path: str | Path, meta: dict | None = None, verify: bool = True):
        self.path, self.verify = Path(path), verify
        self.meta = meta or read_meta(self.path)
        self.num_parts, self.num_nodes = int(self.meta["num_parts"]), int(self.meta["num_nodes"])
        self._node_map: np.ndarray | None = None  # read on first use: a rank's training never needs it
        self._rows: list[tuple[np.ndarray, int] | None] = [None] * self.num_parts
        self._local: np.ndarray | None = None
        self._original: np.ndarray | None = None

    @property
    def node_map(self) -> np.ndarray:
        if self._node_map is None:
            self._node_map = read_node_map(self.path, self.meta, self.verify)
        return self._node_map

    @property
    def original_ids(self) -> np.ndarray | None:
        """The input's id of every global id, where the loader compacted sparse ids (`edges:`), else None."""
        if ORIGINAL_IDS_FILE not in self.meta["sha256"]:
            return None
        if self._original is None:  # read (and checked) once, memory-mapped
            ids = read_root_file(self.path, ORIGINAL_IDS_FILE, self.meta, self.verify)
            if ids.shape != (self.num_nodes,):
                raise DataError(f"{self.path}/{ORIGINAL_IDS_FILE} has {ids.shape[0]} ids for {self.num_nodes} nodes")
            self._original = ids
        return self._original

    def to_original(self, gids) -> np.ndarray:
        """The input's ids of these global ids (the same ids where they were not compacted)."""
        g = self._check(gids)
        ids = self.original_ids
        return g if ids is None else np.asarray(ids[g], np.int64)

    def target_range(self) -> tuple[int, int]:
        """(first global id, count) of the nodes a split covers: every node, or a typed graph's target type."""
        if self.meta.get("format_version") == 2:
            return self.type_range(self.meta["node_types"].index(self.meta["target_type"]))
        return 0, self.num_nodes

    def split(self) -> dict[str, np.ndarray]:
        """The split the partitioner stored, as boolean masks over every node in global-id order (typed
        graphs: over the target type's nodes, in that type's own ids), gathered from every part's masks."""
        if "num_snapshots" in self.meta:
            raise DataError(f"{self.path} holds snapshots: they split by time ({self.meta['num_train_snapshots']} "
                            f"of {self.meta['num_snapshots']} snapshots train), not by node")
        masks = {k: np.zeros(self.num_nodes, bool) for k in SPLIT_KEYS}
        for p in range(self.num_parts):
            inner = self.inner_nodes(p)
            for key, m in zip(SPLIT_KEYS, read_masks(self.path, p, self.meta, self.verify)):
                if m.shape != inner.shape:
                    raise DataError(f"{self.path}/part-{p}/masks.npz has {m.shape[0]} rows for {inner.shape[0]} inner nodes")
                masks[key][inner] = m
        lo, n = self.target_range()
        return {k: m[lo:lo + n] for k, m in masks.items()}

    def adopt(self, part: int, global_ids: np.ndarray, num_inner: int) -> None:
        """Take a part's local rows already read (and verified) by the loader, instead of reading them again."""
        self._rows[part] = (global_ids, int(num_inner))

    def type_range(self, t: int) -> tuple[int, int]:
        """(first global id, count) of node type t in a typed partition: types occupy consecutive id ranges."""
        counts = self.meta["node_counts"]
        return int(sum(counts[:t])), int(counts[t])

    def _part(self, part: int) -> tuple[np.ndarray, int]:
        if not 0 <= part < self.num_parts:
            raise DataError(f"part {part} does not exist ({self.num_parts} parts)")
        if self._rows[part] is None:
            self._rows[part] = read_local_ids(self.path, part, self.meta, self.verify)
        return self._rows[part]

    def _check(self, gids) -> np.ndarray:
        g = np.asarray(gids, dtype=np.int64)
        if g.size and (g.min() < 0 or g.max() >= self.num_nodes):
            bad = int(g[(g < 0) | (g >= self.num_nodes)][0])
            raise DataError(f"global node id {bad} is out of range for {self.num_nodes} nodes")
        return g

    def local_rows(self, part: int) -> np.ndarray:
        """Global id of each of part's local rows: inner rows, then its halo."""
        return self._part(part)[0]

    def inner_nodes(self, part: int) -> np.ndarray:
        """Global ids of part's inner rows, in local order."""
        ids, num_inner = self._part(part)
        return ids[:num_inner]

    def part_of(self, gids) -> np.ndarray:
        return np.asarray(self.node_map)[self._check(gids)].astype(np.int64)

    def to_local(self, gids) -> tuple[np.ndarray, np.ndarray]:
        """(owning part, local id in that part) of each global id."""
        g = self._check(gids)
        if self._local is None:
            local = np.empty(self.num_nodes, np.int64)
            for p in range(self.num_parts):
                inner = self.inner_nodes(p)
                local[inner] = np.arange(inner.shape[0])
            self._local = local
        return self.part_of(g), self._local[g]

    def to_global(self, part: int, local) -> np.ndarray:
        inner = self.inner_nodes(part)
        lid = np.asarray(local, dtype=np.int64)
        if lid.size and (lid.min() < 0 or lid.max() >= inner.shape[0]):
            raise DataError(f"local id out of range for part {part} ({inner.shape[0]} inner nodes)")
        return inner[lid]
