"""One-pass CUDA kernels (Triton): keyed input dropout, and the intB codec's encode and decode.

On the GPU, torch's form of these runs as a chain of elementwise kernels (the
hash alone is about 25 int64 passes over memory); here each is one pass: a
program reads a tile of rows once and writes its result once. They draw the
numba kernels' very bits (`gnn_dist.runtime.numba_kernels`): the same 32-bit
hash of (key, position), the same dither table positions (`_dither_table`,
salted row offsets included), the same float32 operations in the same order.
So a mask or a code drawn on CUDA equals the CPU's for the same key.

Compiled Triton would turn fp32 `/` into an approximate division and fuse
`a * b + c` into an FMA, where numba (no fastmath) rounds each operation:
divisions go through `div_rn`, and every launch passes `enable_fp_fusion=False`
(tests/test_triton_kernels.py checks the PTX for both).

Known differences from numba's records, none visible after decoding: a row
whose minimum (maximum) is a zero and which holds zeros of both signs sends
-0.0 (+0.0) as that end, where numba keeps the first it meets and torch's
vectorised amin any; a row with a NaN sends the quiet NaN 0x7FC00000 as lo and
scale (numba the NaN it met, the same bits for torch's NaN); a row narrower
than 32 values holding both infinities sends (-inf, inf), numba NaN. Every
such row decodes to the same values. A NaN that arithmetic makes on the GPU
(decoding a NaN row; dropping a NaN) is the GPU's canonical NaN, where x86
keeps the operand's payload: the same value, other bits.

Imported only where a CUDA tensor meets a kernel (`gnn_dist.runtime.kernels.triton`)
or by the tests, which load it with TRITON_INTERPRET=1 to run it on CPU tensors.
"""
from __future__ import annotations

import collections
import importlib.util
import inspect
import itertools
import os
from types import ModuleType

import numpy as np
import torch
import triton
import triton.language as tl

from gnn_dist.runtime.tuning import DITHER_TABLE_VALUES  # numba_kernels' too: the same dither, the same bits

_TABLE = tl.constexpr(DITHER_TABLE_VALUES)  # what a kernel may read of it
TILE = 4096  # values per program: a few KB in flight per program, thousands of programs for a 1M-row block
MAX_BLOCK_W = 2048  # widest column chunk a program takes at once; wider rows loop over chunks
MAX_BLOCK_R = 256  # most rows per program (narrow rows)
NARROW_TILE = 512  # values per one-warp program where Triton cannot vectorise a narrow row (`_tile`)
LAUNCH = {"enable_fp_fusion": False}  # numba's arithmetic: no a * b + c contracted into an FMA
BITS = (8, 4, 2)  # codec.INT_BITS, the widths a code may have (tests/test_triton_kernels.py holds them equal)
# Launches by variant, (kernel, ((flag, value), ...)): what the tests read to know that Triton, not torch's
# path, ran (tests/test_gpu.py), and that every variant launched is one the PTX check compiled (`variants`).
LAUNCHES: collections.Counter = collections.Counter()


@triton.jit
def _hash32(key, idx):
    """numba_kernels._hash32 in uint32 (the numba form masks to 32 bits after every product)."""
    h = idx * 0x9E3779B1 + key
    h ^= h >> 16
    h *= 0x85EBCA6B
    h ^= h >> 13
    h *= 0xC2B2AE35
    h ^= h >> 16
    return h


@triton.jit
def _uniform(key, idx):
    """U[0, 1) with 24 bits, numba_kernels._uniform (both products are exact)."""
    return (_hash32(key, idx) >> 8).to(tl.float32) * (1.0 / 16777216.0)


@triton.jit
def _order_key(v):
    """float32 -> int32 that sorts as the floats do, -0.0 below +0.0, NaN beyond the infinities; an involution."""
    i = v.to(tl.int32, bitcast=True)
    return i ^ ((i >> 31) & 0x7FFFFFFF)


@triton.jit
def _multiple_of(v, ALIGN: tl.constexpr):
    """v (a multiple of ALIGN: the caller made sure), written so that Triton's alignment analysis sees it.

    Triton specialises integers divisible by 16 on its own; this tells it that rows of 40 (or 100) values are
    32 (16) bytes aligned, so it loads four values at a time and each thread takes four columns of a row: fewer
    rows per thread, so less per-row work (ranges, divisions, the lo and scale bytes) repeated in each.
    (tl.multiple_of on a scalar argument is lost; this arithmetic form is what the analysis follows.)
    """
    return (v // ALIGN) * ALIGN


@triton.jit(do_not_specialize=["n", "key", "drop_below"])
def _keyed_dropout_kernel(x_ptr, ids_ptr, out_ptr, n, w, stride_x, key, drop_below, scale,
                          BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr, CHUNKS: tl.constexpr, ALIGN: tl.constexpr):
    """out[i, j] = x[i, j] * (scale * keep), keep = hash(key, ids[i] * w + j) >= drop_below (numba's product)."""
    w = _multiple_of(w, ALIGN)
    stride_x = _multiple_of(stride_x, ALIGN)
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < n
    base = tl.load(ids_ptr + rows, mask=rmask, other=0).to(tl.uint32) * w  # the hash sees (id * w) mod 2^32
    k = key.to(tl.uint32, bitcast=True)
    below = drop_below.to(tl.uint32, bitcast=True)
    xrow = x_ptr + rows.to(tl.int64) * stride_x
    orow = out_ptr + rows.to(tl.int64) * w
    for c in range(CHUNKS):  # a constexpr count (TRITON_INTERPRET cannot loop to a tensor bound with numpy 2.4)
        cols = c * BLOCK_W + tl.arange(0, BLOCK_W)
        m = rmask[:, None] & (cols < w)[None, :]
        x = tl.load(xrow[:, None] + cols[None, :], mask=m, other=0.0)
        keep = (_hash32(k, base[:, None] + cols[None, :]) >= below).to(tl.float32)
        tl.store(orow[:, None] + cols[None, :], x * (scale * keep), mask=m)


@triton.jit
def _row_ranges(xrow, rmask, w, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr, CHUNKS: tl.constexpr):
    """Per row min, max (exact, on the order keys, so no reduction order can change a bit) and whether it has a NaN.

    tl.reduce with triton's own combine functions rather than tl.min / tl.max: those are @triton.jit functions of
    triton's, compiled (not interpreted) when triton was imported before TRITON_INTERPRET was set (`interpreted`).
    """
    lo = tl.full([BLOCK_R], 0x7FFFFFFF, tl.int32)
    hi = tl.full([BLOCK_R], -0x80000000, tl.int32)
    for c in range(CHUNKS):
        cols = c * BLOCK_W + tl.arange(0, BLOCK_W)
        m = rmask[:, None] & (cols < w)[None, :]
        k = _order_key(tl.load(xrow[:, None] + cols[None, :], mask=m, other=0.0))
        lo = tl.minimum(lo, tl.reduce(tl.where(m, k, 0x7FFFFFFF), 1, tl.standard._elementwise_min))
        hi = tl.maximum(hi, tl.reduce(tl.where(m, k, -0x80000000), 1, tl.standard._elementwise_max))
    nan = (hi > 0x7F800000) | (lo < -0x7F800001)  # beyond the keys of +inf and -inf
    return _order_key(lo).to(tl.float32, bitcast=True), _order_key(hi).to(tl.float32, bitcast=True), nan


@triton.jit
def _store_f32_bytes(ptr, v, mask):
    """Little-endian bytes of float32 v at ptr .. ptr + 3 (wire records are byte-aligned)."""
    bits = v.to(tl.uint32, bitcast=True)
    for b in tl.static_range(4):
        tl.store(ptr + b, ((bits >> (8 * b)) & 0xFF).to(tl.uint8), mask=mask)


@triton.jit
def _load_f32_bytes(ptr, mask):
    bits = tl.full(ptr.shape, 0, tl.uint32)  # tl.zeros is one of triton's @jit functions
    for b in tl.static_range(4):
        bits |= tl.load(ptr + b, mask=mask, other=0).to(tl.uint32) << (8 * b)
    return bits.to(tl.float32, bitcast=True)


@triton.jit(do_not_specialize=["n", "key"])
def _encode_kernel(x_ptr, idx_ptr, out_ptr, scale_ptr, n, w, pw, stride_x, key,
                   BITS: tl.constexpr, HAS_IDX: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
                   CHUNKS: tl.constexpr, ALIGN: tl.constexpr):
    """Rows x[idx] -> wire records [codes, planar-packed | lo | scale] at out_ptr; numba_kernels.encode_into.

    pw, the packed width, comes from the caller: an argument divisible by 16 lets Triton vectorise the planes.
    """
    w, pw, stride_x = _multiple_of(w, ALIGN), _multiple_of(pw, ALIGN), _multiple_of(stride_x, ALIGN)
    PER: tl.constexpr = 8 // BITS
    TOP: tl.constexpr = (1 << BITS) - 1
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < n
    if HAS_IDX:
        src = tl.load(idx_ptr + rows, mask=rmask, other=0).to(tl.int64)
    else:
        src = rows.to(tl.int64)
    xrow = x_ptr + src * stride_x
    lo, hi, nan = _row_ranges(xrow, rmask, w, BLOCK_R, PER * BLOCK_K, CHUNKS)
    quiet_nan = tl.full([BLOCK_R], 0x7FC00000, tl.int32).to(tl.float32, bitcast=True)
    lo = tl.where(nan, quiet_nan, lo)
    scale = tl.where(nan, quiet_nan, tl.math.div_rn(hi - lo, tl.full([BLOCK_R], TOP, tl.float32)))
    inv = tl.where(scale == 0, 0.0, tl.math.div_rn(tl.full([BLOCK_R], 1.0, tl.float32), tl.where(scale == 0, 1.0, scale)))
    k = key.to(tl.uint32, bitcast=True)
    i = rows.to(tl.uint32)
    # numba_kernels._dither_table: one value per element where the block fits the table, else salted row offsets
    start = tl.where(n.to(tl.int64) * w <= _TABLE, i * w, _hash32(k ^ 0x5BD1E995, i) & (_TABLE - 1))
    orow = out_ptr + rows.to(tl.int64) * (pw + 8)
    for c in range(CHUNKS):  # chunks of packed bytes; PER * BLOCK_K columns each, so CHUNKS also covers w
        kk = c * BLOCK_K + tl.arange(0, BLOCK_K)
        byte = tl.full([BLOCK_R, BLOCK_K], 0, tl.int32)
        for t in tl.static_range(PER):  # plane t holds columns t * pw + k
            col = t * pw + kk
            m = rmask[:, None] & ((kk < pw) & (col < w))[None, :]
            x = tl.load(xrow[:, None] + col[None, :], mask=m, other=0.0)
            v = (x - lo[:, None]) * inv[:, None] + _uniform(k, start[:, None] + col[None, :])
            code = tl.where(v > TOP, TOP, tl.where(v >= 0.0, v, 0.0))  # numba's min(v, top); NaN -> 0 as its cast
            byte |= tl.where(m, code.to(tl.int32), 0) << (t * BITS)
        tl.store(orow[:, None] + kk[None, :], byte.to(tl.uint8), mask=rmask[:, None] & (kk < pw)[None, :])
    _store_f32_bytes(orow + pw, lo, rmask)
    _store_f32_bytes(orow + pw + 4, scale, rmask)
    tl.store(scale_ptr + rows, scale, mask=rmask)


@triton.jit(do_not_specialize=["n"])  # a new row count must not compile a new variant
def _decode_kernel(rec_ptr, out_ptr, idx_ptr, n, w, pw, stride_o,
                   BITS: tl.constexpr, HAS_IDX: tl.constexpr, ADD: tl.constexpr,
                   BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, CHUNKS: tl.constexpr, ALIGN: tl.constexpr):
    """Wire records -> out[idx[i]] = code * scale + lo (+= with ADD); numba_kernels.decode_into."""
    w, pw, stride_o = _multiple_of(w, ALIGN), _multiple_of(pw, ALIGN), _multiple_of(stride_o, ALIGN)
    PER: tl.constexpr = 8 // BITS
    MASK: tl.constexpr = (1 << BITS) - 1
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < n
    rrow = rec_ptr + rows.to(tl.int64) * (pw + 8)
    lo = _load_f32_bytes(rrow + pw, rmask)
    scale = _load_f32_bytes(rrow + pw + 4, rmask)
    if HAS_IDX:
        dst = tl.load(idx_ptr + rows, mask=rmask, other=0).to(tl.int64)
    else:
        dst = rows.to(tl.int64)
    orow = out_ptr + dst * stride_o
    for c in range(CHUNKS):  # chunks of packed bytes; PER * BLOCK_K columns each, so CHUNKS also covers w
        kk = c * BLOCK_K + tl.arange(0, BLOCK_K)
        byte = tl.load(rrow[:, None] + kk[None, :], mask=rmask[:, None] & (kk < pw)[None, :], other=0).to(tl.int32)
        for t in tl.static_range(PER):
            col = t * pw + kk
            m = rmask[:, None] & ((kk < pw) & (col < w))[None, :]
            v = ((byte >> (t * BITS)) & MASK).to(tl.float32) * scale[:, None] + lo[:, None]
            if ADD:
                v = tl.load(orow[:, None] + col[None, :], mask=m, other=0.0) + v
            tl.store(orow[:, None] + col[None, :], v, mask=m)


def _tile(width: int, per: int = 1, align: int = 16) -> tuple[int, int, int, int]:
    """(rows, block, chunks, warps) per program: about TILE values, whole rows where they fit, coalesced along a
    row; `block` counts packed bytes (`per` values each), `chunks` blocks cover a row.

    Rows Triton cannot load four values at a time (`align` < 4: odd widths) get one value per thread per row, so
    per-row work repeats in every row a thread touches; narrow ones go to one-warp programs of NARROW_TILE values
    (8 rows of 64 columns): in a sweep of tile shapes on an H200 at widths 37 and 47, the fastest for encode and
    decode alike, two to three times the default tiles there.
    """
    cols = min(triton.next_power_of_2(max(width, 1)), MAX_BLOCK_W)
    block = max(1, cols // per)
    chunks = triton.cdiv(triton.cdiv(width, per), block)
    if align < 4 and cols <= 64:
        return max(1, NARROW_TILE // cols), block, chunks, 1
    rows = max(1, min(TILE // cols, MAX_BLOCK_R))
    return rows, block, chunks, 8 if rows * cols >= TILE else 4


def _align(*ints: int) -> int:
    """The largest power of two up to 16 dividing every one of `ints` (what `_multiple_of` may declare)."""
    a = 16
    while a > 1 and any(v % a for v in ints):
        a //= 2
    return a


KERNELS = {"keyed_dropout": _keyed_dropout_kernel, "encode": _encode_kernel, "decode": _decode_kernel}
TILING = ("BLOCK_R", "BLOCK_W", "BLOCK_K", "CHUNKS", "ALIGN")  # constexprs that size a tile; the rest choose code
FLAG_VALUES = {"BITS": BITS, "HAS_IDX": (False, True), "ADD": (False, True)}


def _variant(kernel: str, **flags) -> tuple:
    """A launch's variant key: the kernel and its code-choosing constexprs, in a fixed order."""
    return kernel, tuple(sorted(flags.items()))


def variants() -> list[tuple]:
    """Every variant key a launch can have: each kernel at every combination of its code-choosing constexprs
    (all of FLAG_VALUES, not only those the codec asks for today), so that compiling each of these (the PTX
    check, tests/test_triton_kernels.py) covers whatever training compiles; tile sizes vary with the width
    and only change how much of a row a program holds, not which operations it runs."""
    out = []
    for kernel in KERNELS:
        names = sorted(flag_names(kernel))
        out += [_variant(kernel, **dict(zip(names, values)))
                for values in itertools.product(*(FLAG_VALUES[n] for n in names))]
    return out


def flag_names(kernel: str) -> list[str]:
    """The kernel's code-choosing constexpr parameters, read from its signature (a new flag must be listed in
    FLAG_VALUES, or `variants` fails)."""
    params = inspect.signature(KERNELS[kernel].fn).parameters.values()  # (jit and interpreted alike)
    return [p.name for p in params if p.annotation in ("tl.constexpr", tl.constexpr) and p.name not in TILING]


def _bits32(value: int) -> int:
    """The low 32 bits of value as a signed int32 (one kernel signature for every key; bitcast back inside)."""
    v = value & 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def keyed_dropout(x: torch.Tensor, ids: torch.Tensor, drop_below: int, scale: float, key: int) -> torch.Tensor:
    """2-D float32 x -> x * scale where hash(key, ids[i] * width + j) >= drop_below, else 0 (numba's keyed_dropout_rows)."""
    n, w = x.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty((n, w), dtype=x.dtype, device=x.device)
    if n == 0 or w == 0:
        return out
    align = _align(w, x.stride(0))
    br, bw, chunks, warps = _tile(w, 1, align)
    LAUNCHES[_variant("keyed_dropout")] += 1
    _keyed_dropout_kernel[(triton.cdiv(n, br),)](x, ids, out, n, w, x.stride(0), _bits32(key), _bits32(drop_below),
                                                 float(np.float32(scale)), BLOCK_R=br, BLOCK_W=bw, CHUNKS=chunks,
                                                 ALIGN=align, num_warps=warps, **LAUNCH)
    return out


def encode_rows(x: torch.Tensor, index: torch.Tensor | None, bits: int, key: int, out: torch.Tensor) -> torch.Tensor:
    """intB wire records of x[index] (all rows of 2-D float32 x without one) into contiguous uint8 `out`
    (rows * (packed + 8) bytes, e.g. a peer's slice of the send buffer); returns the row scales."""
    n = x.shape[0] if index is None else index.shape[0]
    w = x.shape[1]
    scale = torch.empty(n, dtype=torch.float32, device=x.device)
    if n == 0:
        return scale
    if x.stride(1) != 1:
        x = x.contiguous()
    pw = triton.cdiv(w, 8 // bits)
    align = _align(w, pw, x.stride(0))
    br, bk, chunks, warps = _tile(w, 8 // bits, align)
    LAUNCHES[_variant("encode", BITS=bits, HAS_IDX=index is not None)] += 1
    _encode_kernel[(triton.cdiv(n, br),)](x, x if index is None else index, out, scale, n, w, pw, x.stride(0), _bits32(key),
                                          BITS=bits, HAS_IDX=index is not None, BLOCK_R=br, BLOCK_K=bk, CHUNKS=chunks,
                                          ALIGN=align, num_warps=warps, **LAUNCH)
    return scale


def decode_rows(records: torch.Tensor, bits: int, out: torch.Tensor, index: torch.Tensor | None = None,
                add: bool = False) -> torch.Tensor:
    """intB wire records -> out[index[i]] = code * scale + lo (+= with `add`; out row i without an index).

    `out` is float32 with unit column stride; an index must not repeat a row (the exchange's never do):
    rows of one call are written concurrently.
    """
    pw = triton.cdiv(out.shape[1], 8 // bits)
    n = records.numel() // (pw + 8)
    if n == 0 or pw == 0:
        return out
    align = _align(out.shape[1], pw, out.stride(0))
    br, bk, chunks, warps = _tile(out.shape[1], 8 // bits, align)
    LAUNCHES[_variant("decode", BITS=bits, HAS_IDX=index is not None, ADD=add)] += 1
    _decode_kernel[(triton.cdiv(n, br),)](records, out, out if index is None else index, n, out.shape[1], pw, out.stride(0),
                                          BITS=bits, HAS_IDX=index is not None, ADD=add, BLOCK_R=br, BLOCK_K=bk,
                                          CHUNKS=chunks, ALIGN=align, num_warps=warps, **LAUNCH)
    return out


def interpreted() -> ModuleType:
    """A private copy of this module whose kernels run in Triton's interpreter, on CPU tensors (tests, CPU checks).

    Triton reads TRITON_INTERPRET when @triton.jit wraps a function, so it is set only while the copy loads:
    this module, and everything else in the process, keeps its compiled kernels.
    """
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        spec = importlib.util.spec_from_file_location(f"{__name__}_interpreted", __file__)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before
    return module
