"""How soon a part's sparse product reads a row again, in the order it reads them: the part's reuse curve
(`reuse_curve`), and the reads that curve says stay in a cache of so many rows (`cached_reads`).

Why: a count of how often each row is read (partition.part_counts.top_reads) prices the reads as if they came
in a random order, against two rates (from cache, from memory). A part whose order reads a row again soon
after the last time (R-MAT as generated, a grid in row order) reads much of it from the first levels of
cache, which run 2-3x the last level's rate on this box. scripts/sparse_locality.py --ladder prices a part's
reads band by band, each at the rate of uniformly random reads among that many rows, timed beside it
(docs/benchmarks.md has its figures). The cost model does not price the curve yet: with only the profile's
two rates, counting its last-level hits moved the validation table's rows the wrong way.

A product reads its rows (destinations) in id order, each row's sources and its self loop (`read_order`
puts the loop last; training keeps each row's columns sorted, and scripts/sparse_locality.py sorts them so:
the order within a row moves a reuse time by less than the row's length). A read's reuse time is how many
reads ago its row was read last. The curve counts the reads whose reuse time is at most 2^j, for j = 0 to
log2(reads), rounded up: log2(reads) + 1 numbers, as `top_reads` keeps per part. A first read has none, and
always misses.

`cached_reads` turns the curve into hits of a least-recently-used cache of `rows` rows by the StatStack
estimate (Eklov and Hagersten, ISPASS 2010): the rows read between two reads of one row, t reads apart, are
expected to be the sum over k < t of P(reuse time > k) (a read in the window counts once, at its row's last
read there); a read hits while that is within the cache. torch-free.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def read_order(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of each read a product of CSR (`indptr`, `indices`) makes, in order: each row's columns,
    then the row itself (its self loop)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    n = indptr.shape[0] - 1
    if n < 0 or indptr[0] != 0 or indptr[-1] != len(indices):
        raise ValueError(f"read_order: indptr must start at 0 and end at len(indices) ({len(indices)})")
    deg = np.diff(indptr)
    rows = np.repeat(np.arange(n, dtype=np.int64), deg + 1)
    cols = np.empty(rows.shape[0], dtype=np.int64)
    loops = indptr[1:] + np.arange(n)  # row r's self loop comes after its edges and the r loops before it
    edge = np.ones(rows.shape[0], bool)
    edge[loops] = False
    cols[edge] = np.asarray(indices, dtype=np.int64)
    cols[loops] = np.arange(n)
    return rows, cols


def reuse_curve(cols: np.ndarray) -> list[int]:
    """The reuse curve of one sequence of reads (the row each read reads, in order): how many reads have a
    reuse time of at most 1, 2, 4, ... reads, up to the sequence's length."""
    cols = np.asarray(cols, dtype=np.int64)
    order = np.argsort(cols, kind="stable")  # each row's reads, in their order
    again = np.flatnonzero(cols[order[1:]] == cols[order[:-1]]) + 1
    times = order[again] - order[again - 1]
    length = int(math.ceil(math.log2(cols.size))) + 1 if cols.size > 1 else 1
    counts = np.bincount(np.ceil(np.log2(times)).astype(np.int64), minlength=length)  # time t: bin ceil(log2 t)
    return [int(c) for c in np.cumsum(counts[:length])]


def cached_reads(curve: Sequence[int], reads: float, rows: float) -> float:
    """Reads of the part that hit a least-recently-used cache of `rows` rows, by the StatStack estimate from
    its reuse curve (`reuse_curve`, over `reads` reads). Between the curve's points (reuse times 1, 2, 4, ...)
    the reads reused are taken to grow linearly in the time."""
    if reads <= 0 or not curve or rows <= 0:
        return 0.0
    t_prev, c_prev, distinct = 0.0, 0.0, 0.0  # distinct: rows expected between two reads t_prev apart
    for j, c in enumerate(curve):
        t = float(1 << j)
        step = (t - t_prev) * (1.0 - (c_prev + c) / 2.0 / reads)  # sum of P(reuse time > k) over the step
        if distinct + step >= rows:  # the cache's edge falls in this step: the share of it within
            frac = (rows - distinct) / step if step > 0 else 1.0
            return c_prev + frac * (c - c_prev)
        t_prev, c_prev, distinct = t, float(c), distinct + step
    return float(curve[-1])
