"""Fused CPU kernels (numba): the intB codecs, dropout masks, and CSR row products.

Codecs: one read of the input per encode, one write per decode.

The torch expression of stochastic rounding makes about seven passes over
memory (min, max, scale, dither, clamp, cast, pack); here the row ranges come
from torch's vectorised min / max, then one pass per row writes the packed
codes. Dither values are counter-based hashes of (key, position), so a
block's dither depends only on its key. The byte layout is the one
`gnn_dist.runtime.codec.pack` writes, so either side of a link may use either
implementation.

Dropout: torch draws its Bernoulli mask with a generator call per element
(about 14 ns each here, 43% of a GCN training step on the CPU); the same
counter hash draws it at about 1 ns.

Numba compiles these on first use (a second or two, cached on disk
afterwards), so callers import this module only when a kernel first runs on
the CPU, and only where numba is installed.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from gnn_dist.runtime.tuning import DITHER_TABLE_VALUES

_M32 = np.uint64(0xFFFFFFFF)


@nb.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _hash32(key, idx):
    """murmur3's 32-bit finaliser of (index * golden ratio + key): 32 random bits per (key, index).

    32-bit arithmetic (masked, so LLVM keeps it 32-bit and vectorises it);
    another key shifts the stream by a random offset in 2^32.
    """
    h = (idx * np.uint64(0x9E3779B1) + key) & _M32
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & _M32
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & _M32
    h ^= h >> np.uint64(16)
    return h


@nb.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _uniform(key, idx):
    """U[0, 1) with 24 bits."""
    return np.float32(_hash32(key, idx) >> np.uint64(8)) * np.float32(1.0 / 16777216.0)


@nb.njit(cache=True, nogil=True, boundscheck=False)
def _dither_table(key, n, w):
    """Uniforms for a block of n rows of width w, and each row's start in them.

    Hashing every element costs three times the rest of encoding, so a block
    hashes at most DITHER_TABLE_VALUES + w values. Blocks that fit use one value per
    element (as independent as hashing each); larger ones read row i at a
    random offset, so each element's dither is still U[0, 1) (the rounding
    stays unbiased, the variance unchanged) and two rows share a value at
    the same column with probability 1 / DITHER_TABLE_VALUES.
    """
    fits = n * w <= DITHER_TABLE_VALUES
    size = n * w if fits else DITHER_TABLE_VALUES + w
    table = np.empty(size, np.float32)
    for t in range(size):
        table[t] = _uniform(key, np.uint64(t))
    start = np.empty(n, np.int64)
    salt = key ^ np.uint64(0x5BD1E995)
    for i in range(n):
        start[i] = i * w if fits else np.int64(_hash32(salt, np.uint64(i)) & np.uint64(DITHER_TABLE_VALUES - 1))
    return table, start


@nb.njit(cache=True, nogil=True, boundscheck=False)
def encode_into(x, rows, row_lo, row_hi, out, lo_out, scale_out, bits, key):
    """Rows x[rows] of float32 x -> out[:, :packed] codes (planar packing), lo_out / scale_out float32 [n].

    Reading through `rows` saves the exchange from gathering its send rows
    first. The row ranges `row_lo` / `row_hi` (per row of x) come from the
    caller, as torch's vectorised min / max over wide rows is five times
    numba's loop here; empty ones mean "take them here" (narrow rows, where
    torch's per-row overhead dominates).
    """
    n, w = rows.shape[0], x.shape[1]
    per = 8 // bits
    pw = (w + per - 1) // per
    top = np.float32((1 << bits) - 1)
    table, start = _dither_table(np.uint64(key), n, w)
    given = row_lo.shape[0] > 0
    codes = np.zeros(pw * per, np.uint8)
    for i in range(n):
        r = rows[i]
        row = x[r]
        if given:
            lo, hi = row_lo[r], row_hi[r]
        else:
            lo, hi, total = row[0], row[0], row[0]
            for j in range(1, w):
                lo, hi, total = min(lo, row[j]), max(hi, row[j]), total + row[j]
            if total != total:  # min / max skip a NaN; send it as the row's range so the receiver sees NaN
                lo = hi = total
        scale = np.float32((hi - lo) / top)
        inv = np.float32(0.0) if scale == 0 else np.float32(1.0) / scale
        u = table[start[i]: start[i] + w]
        for j in range(w):  # values >= 0, so the truncating cast is the floor
            codes[j] = np.uint8(np.int32(min((row[j] - lo) * inv + u[j], top)))
        o = out[i]
        if bits == 8:
            for j in range(w):
                o[j] = codes[j]
        elif bits == 4:
            for k in range(pw):
                o[k] = codes[k] | (codes[k + pw] << np.uint8(4))
        else:
            for k in range(pw):
                o[k] = (codes[k] | (codes[k + pw] << np.uint8(2)) | (codes[k + 2 * pw] << np.uint8(4))
                        | (codes[k + 3 * pw] << np.uint8(6)))
        lo_out[i] = lo
        scale_out[i] = scale


@nb.njit(cache=True, nogil=True, boundscheck=False)
def decode_into(payload, lo, scale, out, rows, add, bits):
    """payload uint8 [n, >= packed] (planar packing) -> out[rows[i]] = code * scale + lo (+= with `add`).

    `add` lets the backward exchange sum received gradients straight into the
    inner-row gradient: the same arithmetic and order as decoding and then
    index_add_, without the decoded block in between.
    """
    n, w = payload.shape[0], out.shape[1]
    per = 8 // bits
    pw = (w + per - 1) // per
    mask = np.uint8((1 << bits) - 1)
    codes = np.zeros(pw * per, np.float32)
    for i in range(n):
        if bits == 8:
            for j in range(w):
                codes[j] = np.float32(payload[i, j])
        else:
            for t in range(per):
                shift = np.uint8(t * bits)
                for k in range(pw):
                    codes[t * pw + k] = np.float32((payload[i, k] >> shift) & mask)
        s, b = scale[i], lo[i]
        o = out[rows[i]]
        if add:
            for j in range(w):
                o[j] += codes[j] * s + b
        else:
            for j in range(w):
                o[j] = codes[j] * s + b


@nb.njit(cache=True, nogil=True, boundscheck=False)
def dropout_into(lo, hi, x, out, mask, drop_below, scale, key, relu):
    """Flat float32 x[lo:hi] -> out = x * scale where kept, else 0; mask = 1 where kept (kept: hash >= drop_below).

    The mask of element i depends on (key, i) only, so any split of [0, n) into ranges gives the same result.
    With `relu`, x goes through ReLU first (NaN and -0.0 pass, as in torch) and the mask also clears where x <= 0,
    so the one backward pass, grad * scale * mask, is ReLU's and dropout's together.
    """
    key = np.uint64(key)
    threshold = np.uint64(drop_below)
    scale = np.float32(scale)  # as torch multiplies a float32 tensor by a Python float
    if relu:
        for i in range(lo, hi):
            keep = _hash32(key, np.uint64(i)) >= threshold
            v = x[i]
            mask[i] = np.uint8(keep) & np.uint8(not v <= 0)  # NaN keeps its gradient, as in torch's ReLU backward
            out[i] = (np.float32(0.0) if v < 0 else v) * (scale * np.float32(keep))  # -0.0 and NaN pass ReLU
    else:
        for i in range(lo, hi):
            keep = _hash32(key, np.uint64(i)) >= threshold
            mask[i] = np.uint8(keep)
            out[i] = x[i] * (scale * np.float32(keep))  # branch-free: 1.4x faster than a select


@nb.njit(cache=True, nogil=True, boundscheck=False)
def dropout_grad_into(lo, hi, grad, mask, scale, out):
    """Flat: out = grad * scale where the mask kept the element, else 0 (one pass; torch's uint8 product
    and scale take two, with a dtype conversion)."""
    scale = np.float32(scale)
    for i in range(lo, hi):
        out[i] = grad[i] * (scale * np.float32(mask[i]))


@nb.njit(cache=True, nogil=True, boundscheck=False)
def keyed_dropout_rows(lo, hi, x, out, ids, drop_below, scale, key):
    """Rows lo..hi of x (2-D float32) -> out, element j of row i kept where hash(key, ids[i] * width + j) >=
    drop_below.

    The mask of an element depends on its node's global id, not on where the
    row sits, so every rank holding a copy of a row drops the same elements.
    """
    key = np.uint64(key)
    threshold = np.uint64(drop_below)
    scale = np.float32(scale)
    w = x.shape[1]
    for i in range(lo, hi):
        base = np.uint64(ids[i]) * np.uint64(w)
        xi, oi = x[i], out[i]
        for j in range(w):
            keep = np.float32(_hash32(key, base + np.uint64(j)) >= threshold)
            oi[j] = xi[j] * (scale * keep)  # branch-free (1.7x faster than a select)


@nb.njit(cache=True, nogil=True, boundscheck=False)
def csr_rows_into(lo, hi, indptr, indices, values, x, out, add):
    """Rows lo..hi of a @ x for a CSR `a`, written to `out` (or added to it).

    Each row's sum runs in column order into a row buffer before it is
    stored or added, the order MKL's CSR product uses on AVX2 machines, so
    results there are bit for bit the same (MKL's AVX-512 path fuses
    multiply-adds: the same within rounding); without MKL's dispatch and its
    second pass it runs 1.7-2.4x faster on 128-wide float32 rows here.
    """
    w = x.shape[1]
    acc = np.empty(w, dtype=out.dtype)
    for i in range(lo, hi):
        acc[:] = 0
        for k in range(indptr[i], indptr[i + 1]):
            v = values[k]
            row = x[indices[k]]
            for f in range(w):
                acc[f] += v * row[f]
        if add:
            for f in range(w):
                out[i, f] += acc[f]
        else:
            for f in range(w):
                out[i, f] = acc[f]
