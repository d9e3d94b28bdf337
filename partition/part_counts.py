"""What the cost model reads of a partition, per part: inner, central and halo rows, rows sent, edges, edges
from halo rows (`halo_edges`: the product's share that waits for the exchange), and `top_reads` (how often
its most-read rows are read): counted from an assignment (`part_counts`, what the default partition's
candidates are priced by), from a built part (`plan_top_reads`, `plan_halo_edges`: what partition.json
keeps), or read back from partition.json (`parts_from_meta`). torch-free."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from partition.errors import PartitionFormatError


def top_reads(counts: np.ndarray) -> list[int]:
    """Reads of a part's 1, 2, 4, ... most-read source rows, up to all of them (`counts`: reads of each row by
    the part's edges and self loops): the cumulative curve `sparse_seconds` takes its hot share from, in
    log2(rows) + 1 numbers (what partition.json keeps per part)."""
    cum = np.cumsum(np.sort(np.asarray(counts, dtype=np.int64))[::-1])
    if cum.size == 0:
        return [0]
    tops = np.minimum(1 << np.arange(int(np.ceil(np.log2(cum.size))) + 1), cum.size) - 1
    return [int(c) for c in cum[tops]]


def plan_top_reads(indices: np.ndarray, num_inner: int, num_rows: int) -> list[int]:
    """`top_reads` of a built part: its local edges' sources (inner and halo rows) and its inner rows' self loops."""
    return top_reads(np.bincount(np.concatenate([np.asarray(indices, dtype=np.int64), np.arange(num_inner)]),
                                 minlength=num_rows))


def part_counts(src: np.ndarray, dst: np.ndarray, parts: np.ndarray, num_parts: int) -> list[dict]:
    """Per part, the counts `predict` reads, straight from an assignment (no plans built): what a partitioner
    calls for each candidate."""
    parts = np.asarray(parts, dtype=np.int64)
    inner = np.bincount(parts, minlength=num_parts)
    edges = np.bincount(parts[dst], minlength=num_parts)
    cross = parts[src] != parts[dst]
    marginal = np.zeros(parts.shape[0], bool)
    marginal[dst[cross]] = True
    central = inner - np.bincount(parts[marginal], minlength=num_parts)
    pairs = _distinct(src[cross].astype(np.int64) * num_parts + parts[dst[cross]], parts.shape[0] * num_parts)
    # (node, receiving part) pairs, each once
    halo = np.bincount(pairs % num_parts, minlength=num_parts)
    sent = np.bincount(parts[pairs // num_parts], minlength=num_parts)
    halo_edges = np.bincount(parts[dst[cross]], minlength=num_parts)  # a halo row is a source in another part
    tops = _parts_top_reads(src, dst, parts, num_parts)
    return [{"inner": int(inner[k]), "central": int(central[k]), "halo": int(halo[k]), "edges": int(edges[k]),
             "sent": int(sent[k]), "halo_edges": int(halo_edges[k]), "top_reads": tops[k]} for k in range(num_parts)]


def _parts_top_reads(src: np.ndarray, dst: np.ndarray, parts: np.ndarray, num_parts: int) -> list[list[int]]:
    """Per part, `top_reads` of its edges' sources and its self loops (as `plan_top_reads` counts a built part)."""
    n = parts.shape[0]
    keys = np.concatenate([parts[dst] * n + np.asarray(src, dtype=np.int64), parts * n + np.arange(n)])
    if n * num_parts <= DENSE_KEYS:  # a count per (reading part, row): a pass, where sorting the keys takes seconds
        counts = np.bincount(keys, minlength=n * num_parts).reshape(num_parts, n)
        return [top_reads(row[row > 0]) for row in counts]
    rows, counts = np.unique(keys, return_counts=True)  # one entry per (reading part, row read)
    bounds = np.searchsorted(rows // n, np.arange(num_parts + 1))
    return [top_reads(counts[bounds[k]:bounds[k + 1]]) for k in range(num_parts)]


DENSE_KEYS = 1 << 23  # (row, part) keys counted in an array of their own up to this many (64 MB of counts)


def _distinct(keys: np.ndarray, space: int) -> np.ndarray:
    """The distinct `keys` (each in [0, space)), sorted: marked in an array where the space is small enough,
    else sorted (np.unique)."""
    if space <= DENSE_KEYS:
        seen = np.zeros(space, bool)
        seen[keys] = True
        return np.flatnonzero(seen)
    return np.unique(keys)


def _count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def plan_halo_edges(indices: np.ndarray, num_inner: int) -> int:
    """Edges of a built part whose source is a halo row (local ids from `num_inner` on)."""
    return int(np.count_nonzero(np.asarray(indices) >= num_inner))


def parts_from_meta(meta: Mapping) -> list[dict]:
    """The counts `predict` reads, from a partition directory's partition.json (rows sent where recorded;
    `halo_edges` where recorded, None in older partitions). partition.json carries no checksum of its own: an
    edited count is one line, not a traceback mid-launch."""
    sent = (meta.get("stats") or {}).get("send_per_part")
    out = []
    for k, r in enumerate(meta["parts"]):
        part = {key: r.get(key) if isinstance(r, Mapping) else None for key in ("inner", "central", "halo", "edges")}
        part["sent"] = sent[k] if isinstance(sent, list) and k < len(sent) else part["halo"]
        top = r.get("top_reads") if isinstance(r, Mapping) else None
        halo_edges = r.get("halo_edges") if isinstance(r, Mapping) else None
        bad = [key for key, v in part.items() if not _count(v)]
        if halo_edges is not None and not (_count(halo_edges) and not bad  # each halo row is read at least once
                                           and part["halo"] <= halo_edges <= part["edges"]):
            bad.append("halo_edges")
        if top is not None and not (isinstance(top, list) and 0 < len(top) <= 64 and all(map(_count, top))
                                    and all(a <= b for a, b in zip(top, top[1:]))):
            bad.append("top_reads")
        if bad:
            raise PartitionFormatError(f"partition.json: part {k}'s '{bad[0]}' is not a count (or, for top_reads, "
                                       f"a rising list of counts; for halo_edges, between its halo rows and its "
                                       f"edges): {str(r)[:80]}")
        out.append(dict(part, top_reads=top, halo_edges=halo_edges))
    return out
