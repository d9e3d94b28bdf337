"""The partition book: explicit id mappings of a partition directory, as DGL keeps them.

global id -> owning part (`node_map.npy`), global id -> local id within the
owner's inner rows, and back. Local ids follow the DESIGN local order
(central first, then marginal), so they are what `LocalGraph` row i means.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from partition.errors import DataError, PartitionFormatError
from partition.store import read_meta


class PartitionBook:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.meta = read_meta(self.path)
        self.num_parts, self.num_nodes = int(self.meta["num_parts"]), int(self.meta["num_nodes"])
        try:
            self.node_map = np.load(self.path / "node_map.npy", mmap_mode="r")
        except (OSError, ValueError) as e:
            raise PartitionFormatError(f"{self.path}/node_map.npy cannot be read: {e}") from None
        if self.node_map.shape != (self.num_nodes,):
            raise PartitionFormatError(f"{self.path}/node_map.npy has {self.node_map.shape[0]} entries "
                                       f"for {self.num_nodes} nodes")
        self._inner: list[np.ndarray | None] = [None] * self.num_parts
        self._local: np.ndarray | None = None

    def _check(self, gids) -> np.ndarray:
        g = np.asarray(gids, dtype=np.int64)
        if g.size and (g.min() < 0 or g.max() >= self.num_nodes):
            bad = int(g[(g < 0) | (g >= self.num_nodes)][0])
            raise DataError(f"global node id {bad} is out of range for {self.num_nodes} nodes")
        return g

    def inner_nodes(self, part: int) -> np.ndarray:
        """Global ids of part's inner rows, in local order."""
        if not 0 <= part < self.num_parts:
            raise DataError(f"part {part} does not exist ({self.num_parts} parts)")
        if self._inner[part] is None:
            with np.load(self.path / f"part-{part}" / "nodes.npz") as z:
                self._inner[part] = z["global_ids"][: int(z["num_inner"])]
        return self._inner[part]

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
