"""Fused CPU kernels (numba): the intB codecs, and dropout masks.

Codecs: one read of the input per encode, one write per decode.

The torch expression of stochastic rounding makes about seven passes over
memory (min, max, scale, dither, clamp, cast, pack) and draws its uniforms
from a pool; here each row is read twice (range, then codes) and each
element's uniform is a counter-based hash of (key, element index), so a
block's dither depends only on its key. The byte layout is the one
`gnn_dist.codec.pack` writes, so either side of a link may use either
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
def encode_into(x, rows, out, lo_out, scale_out, bits, key):
    """Rows x[rows] of float32 x -> out[:, :packed] codes (planar packing), lo_out / scale_out float32 [n].

    Reading through `rows` saves the exchange from gathering its send rows first.
    """
    n, w = rows.shape[0], x.shape[1]
    per = 8 // bits
    pw = (w + per - 1) // per
    top = np.float32((1 << bits) - 1)
    key = np.uint64(key)
    codes = np.zeros(pw * per, np.uint8)
    for i in range(n):
        r = rows[i]
        lo = x[r, 0]
        hi = x[r, 0]
        for j in range(1, w):
            lo = min(lo, x[r, j])
            hi = max(hi, x[r, j])
        scale = np.float32((hi - lo) / top)
        inv = np.float32(0.0) if scale == 0 else np.float32(1.0) / scale
        base = np.uint64(i) * np.uint64(w)
        for j in range(w):  # values >= 0, so the truncating cast is the floor
            q = (x[r, j] - lo) * inv + _uniform(key, base + np.uint64(j))
            codes[j] = np.uint8(min(q, top))
        if bits == 8:
            for j in range(w):
                out[i, j] = codes[j]
        elif bits == 4:
            for k in range(pw):
                out[i, k] = codes[k] | (codes[k + pw] << np.uint8(4))
        else:
            for k in range(pw):
                out[i, k] = (codes[k] | (codes[k + pw] << np.uint8(2)) | (codes[k + 2 * pw] << np.uint8(4))
                             | (codes[k + 3 * pw] << np.uint8(6)))
        lo_out[i] = lo
        scale_out[i] = scale


@nb.njit(cache=True, nogil=True, boundscheck=False)
def decode_into(payload, lo, scale, out, bits):
    """payload uint8 [n, >= packed] (planar packing) -> out float32 [n, w] = code * scale + lo."""
    n, w = out.shape
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
        for j in range(w):
            out[i, j] = codes[j] * s + b


@nb.njit(cache=True, nogil=True, boundscheck=False)
def dropout_into(x, out, mask, drop_below, scale, key):
    """Flat float32 x -> out = x * scale where kept, else 0; mask = 1 where kept (kept: hash >= drop_below)."""
    key = np.uint64(key)
    threshold = np.uint64(drop_below)
    scale = np.float32(scale)  # as torch multiplies a float32 tensor by a Python float
    for i in range(x.shape[0]):
        keep = _hash32(key, np.uint64(i)) >= threshold
        mask[i] = np.uint8(keep)
        out[i] = x[i] * scale if keep else np.float32(0.0)
