"""Message codecs (docs/design.md §5): fp32, fp16, bf16 and stochastic intB (B = 8, 4, 2).

intB keeps per row `lo = min` and `scale = (max - min) / (2^B - 1)` in fp32
(fp16 would underflow on gradients) and rounds stochastically,
q = floor((x - lo) / scale + u) with u ~ U[0, 1), so E[decode] = x.
Values are packed 8 / B per byte, planar: code j of a row sits in byte
j mod P at bit (j div P) * B, P the packed width. Rows with max == min send
a zero payload.

On the CPU, fused numba kernels (`numba_kernels`) do the work where numba is installed; on CUDA, Triton
kernels (`triton_kernels`: numba's keyed dither, so a key draws the same codes) where triton is; elsewhere
(or with GNN_DIST_CODEC=torch) torch expressions do. All write the same bytes layout and decode alike.

Each encode takes an integer `key` that fixes its dither (the exchange passes one from the epoch's dither
stream, `gnn_dist.runtime.streams`); without one, a key is drawn (`streams.dither_key`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gnn_dist.runtime import kernels, streams, tuning
from partition.wire import CODECS, INT_BITS, for_width, packed_width, row_bytes  # noqa: F401 - the codec's API

FLOAT_CODECS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class Encoded:
    """One encoded block: payload bytes plus per-row range (int codecs) and the original width."""

    payload: torch.Tensor  # uint8 [rows, packed] for int codecs, else the cast tensor
    lo: torch.Tensor | None
    scale: torch.Tensor | None
    width: int
    bits: int

    def nbytes(self) -> int:
        n = self.payload.numel() * self.payload.element_size()
        if self.lo is not None:
            n += (self.lo.numel() + self.scale.numel()) * 4
        return n


def wire_bytes(rows: int, width: int, codec: str) -> int:
    """Bytes a block costs on the wire; both sides compute it, so no size handshake is needed."""
    return rows * row_bytes(width, codec)


class DitherPool:
    """Uniform [0, 1) numbers drawn once; each block adds windows of it at fresh random offsets.

    Drawing fresh uniforms costs more than the rest of encoding (torch.rand runs
    at about a tenth of memory bandwidth on a CPU core); a window of a large
    pool is still uniform per element and independent within a window, and the
    random offsets decorrelate successive windows and blocks. The offsets are
    a function of the block's key alone, so a key repeats its dither.
    """

    def __init__(self, size: int = tuning.DITHER_POOL_VALUES, seed: int = 0x5EED):
        self.pool = torch.rand(size, generator=torch.Generator().manual_seed(seed))
        self.window = size // 2
        self._by_device: dict = {}

    def add_(self, flat: torch.Tensor, key: int) -> torch.Tensor:
        """flat += U[0, 1) elementwise, in place, window by window, at offsets drawn from `key`."""
        device = str(flat.device)
        if device not in self._by_device:
            self._by_device[device] = self.pool.to(flat.device)
        pool = self._by_device[device]
        gen = torch.Generator().manual_seed(key)
        n = flat.numel()
        starts = torch.randint(0, pool.numel() - self.window, ((n + self.window - 1) // self.window,),
                               generator=gen).tolist()
        for i, s in enumerate(starts):
            chunk = flat[i * self.window: (i + 1) * self.window]
            chunk.add_(pool[s: s + chunk.numel()])
        return flat


_DITHER: DitherPool | None = None


def add_dither_(flat: torch.Tensor, key: int) -> torch.Tensor:
    global _DITHER
    if _DITHER is None:
        _DITHER = DitherPool()
    return _DITHER.add_(flat, key)


def quantize(x: torch.Tensor, bits: int, key: int | None = None):
    """Stochastic integer codes (uint8, unpacked), row minimum and row step."""
    if bits not in INT_BITS:
        raise ValueError(f"bits must be one of {INT_BITS}, got {bits}")
    x = x.float()
    lo, hi = x.amin(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)  # two passes beat aminmax on CPU
    scale = (hi - lo) / (2**bits - 1)
    flat = scale == 0
    inv = torch.where(flat, torch.zeros_like(scale), scale.reciprocal())  # flat rows -> code 0
    # (x - lo) / scale + u == x * inv + (-lo * inv) + u, in place in a reused workspace (a fresh
    # buffer per call costs more in page faults than the arithmetic). The values are >= 0, so the
    # truncating cast to uint8 is the floor; only the top needs clamping against rounding.
    q = torch.addcmul(-lo * inv, x, inv, out=_workspace(x.shape, x.device))
    add_dither_(q.view(-1), _key(key))
    q.clamp_(max=2**bits - 1)
    return q.to(torch.uint8), lo.squeeze(1), scale.squeeze(1)


_WS: dict = {}


def _workspace(shape: tuple, device) -> torch.Tensor:
    n = 1
    for d in shape:
        n *= d
    buf = _WS.get(str(device))
    if buf is None or buf.numel() < n:
        buf = _WS[str(device)] = torch.empty(n, device=device)
    return buf[:n].view(shape)


def pack(q: torch.Tensor, bits: int) -> torch.Tensor:
    """Put 8 / bits codes in each byte, planar: code j in byte j mod P, at bit (j div P) * bits."""
    if bits == 8:
        return q.contiguous()
    per = 8 // bits
    rows, width = q.shape
    pw = packed_width(width, bits)
    if per * pw != width:
        q = torch.nn.functional.pad(q, (0, per * pw - width))
    q = q.view(rows, per, pw)
    out = q[:, 0].clone()
    for k in range(1, per):
        out |= q[:, k] << (k * bits)
    return out


def unpack(p: torch.Tensor, bits: int, width: int) -> torch.Tensor:
    if bits == 8:
        return p
    per = 8 // bits
    mask = 2**bits - 1
    parts = [(p >> (k * bits)) & mask for k in range(per)]
    return torch.cat(parts, dim=1)[:, :width]


def _fused(x: torch.Tensor) -> bool:
    """Use the numba kernels for this tensor?"""
    if tuning.ENV.codec_backend == "torch" or x.device.type != "cpu" or x.dim() != 2 or 0 in x.shape:
        return False
    if not kernels.available():
        if tuning.ENV.codec_backend == "fused":
            raise RuntimeError("GNN_DIST_CODEC=fused but numba is not installed")
        return False
    return True


def _triton(x: torch.Tensor) -> bool:
    """Use the Triton kernels for this tensor (CUDA, and triton installed)?"""
    return tuning.ENV.codec_backend != "torch" and x.is_cuda and kernels.triton_available()


def _key(key: int | None) -> int:
    """The encode's dither key: the caller's, or the next one of the dither stream."""
    return streams.dither_key() if key is None else int(key)


def row_ranges(x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Per-row min and max of a float32 CPU tensor for the fused encoder.

    torch's vectorised min / max is five times numba's loop on wide rows; on
    narrow ones its per-row overhead dominates, so those get empty arrays and
    the kernel takes the ranges as it goes.
    """
    if x.shape[1] < tuning.RANGES_IN_KERNEL_BELOW_COLUMNS:
        empty = np.empty(0, np.float32)
        return empty, empty
    return x.amin(dim=1).numpy(), x.amax(dim=1).numpy()


def _fused_encode(x: torch.Tensor, bits: int, key: int | None, out: np.ndarray, index: torch.Tensor | None = None,
                  ranges: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Codes of x[index] (all rows without one) into columns [0, packed) of `out`; returns lo and scale.

    `ranges` (row_ranges of x) may come from the caller when it encodes several
    index blocks of one x; without them, an index that picks few of x's rows
    gathers them first rather than taking ranges over all of x.
    """
    x = x.detach().to(torch.float32)
    if ranges is None and index is not None and 2 * index.shape[0] < x.shape[0]:
        x, index = x[index], None
    x = x.contiguous()
    row_lo, row_hi = ranges if ranges is not None else row_ranges(x)
    xn = x.numpy()
    rows = np.arange(xn.shape[0]) if index is None else index.numpy()
    lo, scale = np.empty(rows.shape[0], np.float32), np.empty(rows.shape[0], np.float32)
    kernels.load().encode_into(xn, rows, row_lo, row_hi, out, lo, scale, bits, _key(key))
    return lo, scale


def encode(x: torch.Tensor, codec: str, key: int | None = None) -> Encoded:
    if codec in FLOAT_CODECS:
        return Encoded(x.to(FLOAT_CODECS[codec]), None, None, x.shape[1], torch.finfo(FLOAT_CODECS[codec]).bits)
    if codec not in CODECS:
        raise ValueError(f"unknown codec '{codec}' (choose from {', '.join(CODECS)})")
    bits = int(codec[3:])
    if _fused(x):
        out = np.empty((x.shape[0], packed_width(x.shape[1], bits)), np.uint8)
        lo, scale = _fused_encode(x, bits, key, out)
        return Encoded(torch.from_numpy(out), torch.from_numpy(lo), torch.from_numpy(scale), x.shape[1], bits)
    q, lo, scale = quantize(x, bits, key)
    return Encoded(pack(q, bits), lo, scale, x.shape[1], bits)


def decode(e: Encoded, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    if e.lo is None:
        return e.payload.to(dtype)
    if _fused(e.payload):
        out = np.empty((e.payload.shape[0], e.width), np.float32)
        kernels.load().decode_into(e.payload.numpy(), e.lo.contiguous().numpy(), e.scale.contiguous().numpy(), out,
                                    np.arange(out.shape[0]), False, e.bits)
        return torch.from_numpy(out).to(dtype)
    q = unpack(e.payload, e.bits, e.width).to(torch.float32)
    return q.mul_(e.scale.unsqueeze(1)).add_(e.lo.unsqueeze(1)).to(dtype)


def encode_rows(x: torch.Tensor, codec: str, key: int | None = None,
                out: torch.Tensor | None = None, index: torch.Tensor | None = None,
                ranges: tuple[np.ndarray, np.ndarray] | None = None):
    """Wire records of x (or of x[index]), uint8 [rows, bytes per row] ([payload | lo | scale] for intB),
    and the row scales (intB).

    What the exchange sends, so a row-split all_to_all carries any codec;
    `out` (uint8, wire_bytes long) is filled in place, e.g. a slice of the send buffer.
    """
    on_gpu = codec in CODECS and codec not in FLOAT_CODECS and _triton(x)
    fused_int = codec in CODECS and codec not in FLOAT_CODECS and _fused(x)
    if index is not None and not (fused_int or on_gpu):
        x, index = x[index], None  # gather first: float codecs and the torch path read a dense block
    rows = x.shape[0] if index is None else index.shape[0]
    if out is None:
        out = torch.empty(wire_bytes(rows, x.shape[1], codec), dtype=torch.uint8, device=x.device)
    out = out.view(rows, -1) if rows else out.view(0, 0)
    if codec in FLOAT_CODECS:
        out.copy_(x.to(FLOAT_CODECS[codec]).contiguous().view(torch.uint8).view(rows, -1))
        return out, None
    if on_gpu:  # one pass: row ranges, numba's keyed dither, packing, records straight into `out`
        return out, kernels.triton().encode_rows(x.detach().float(), index, int(codec[3:]), _key(key), out)
    if fused_int:
        o = out.numpy()
        lo, scale = _fused_encode(x, int(codec[3:]), key, o, index, ranges)
        pw = o.shape[1] - 8
        o[:, pw: pw + 4] = lo.view(np.uint8).reshape(-1, 4)
        o[:, pw + 4:] = scale.view(np.uint8).reshape(-1, 4)
        return out, torch.from_numpy(scale)
    e = encode(x, codec, key)
    out.copy_(to_rows(e))
    return out, e.scale


def encode_split(x: torch.Tensor, index: torch.Tensor | None, splits: list[int], codecs: list[str],
                 out: torch.Tensor, key: int | None = None,
                 distinct: tuple[torch.Tensor, torch.Tensor] | None = None) -> list[torch.Tensor | None]:
    """x[index] (all of x without one) cut into consecutive blocks of `splits` rows, block p encoded with
    `codecs[p]` into its slice of `out` (wire_bytes each, in order); returns each block's row scales (intB).

    One call per exchange: the fused kernels' row ranges are taken once for all blocks. With `distinct`
    = (rows, inverse) such that index == rows[inverse], an intB codec shared by several blocks encodes each
    distinct row once and copies its record to every block that sends it (a boundary row goes to ~3
    peers): same distribution per receiver, a third of the encoding. Each encode's key is derived from
    `key` (block p: derive(key, p); a codec's shared records: derive(key, -bits)).
    """
    key = _key(key)
    x = x.flatten(1)
    nbytes = [wire_bytes(r, x.shape[1], c) for r, c in zip(splits, codecs)]
    ranges = None
    if index is not None and any(c not in FLOAT_CODECS for c in codecs) and _fused(x):
        x = x.detach().to(torch.float32).contiguous()
        ranges = row_ranges(x)
    if index is None:
        blocks = [(b, None) for b in torch.split(x.contiguous(), splits)]
    else:
        blocks = [(x, idx) for idx in torch.split(index, splits)]
    shared = {}  # codec -> (records of the distinct rows, their scales)
    if distinct is not None and index is not None:
        used = [c for c, n in zip(codecs, splits) if n and c not in FLOAT_CODECS]
        for name in sorted({c for c in used if used.count(c) > 1}):
            shared[name] = encode_rows(x, name, streams.derive(key, -int(name[3:])), index=distinct[0],
                                       ranges=ranges)
        inverse = torch.split(distinct[1], splits)
    scales = []
    for p, ((block, idx), buf, count, name) in enumerate(zip(blocks, torch.split(out, nbytes), splits, codecs)):
        scale = None
        if count and name in shared:
            records, all_scales = shared[name]
            torch.index_select(records, 0, inverse[p], out=buf.view(count, -1))
            scale = all_scales[inverse[p]]
        elif count:
            _, scale = encode_rows(block, name, streams.derive(key, p), out=buf, index=idx, ranges=ranges)
        scales.append(scale)
    return scales


def _split_records(records: np.ndarray, width: int, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """lo and scale columns of intB wire records, as float32 vectors."""
    pw = packed_width(width, bits)
    lo = np.ascontiguousarray(records[:, pw: pw + 4]).view(np.float32).reshape(-1)
    scale = np.ascontiguousarray(records[:, pw + 4: pw + 8]).view(np.float32).reshape(-1)
    return lo, scale


def decode_rows(records: torch.Tensor, codec: str, width: int, dtype: torch.dtype = torch.float32,
                out: torch.Tensor | None = None) -> torch.Tensor:
    """Inverse of encode_rows: wire bytes of `rows` records -> [rows, width] of `dtype` (into `out` if given)."""
    rows = records.numel() // max(wire_bytes(1, width, codec), 1)
    records = records.view(rows, -1)
    if out is None:
        out = torch.empty(rows, width, dtype=dtype, device=records.device)
    if codec in FLOAT_CODECS:
        out.copy_(records.contiguous().view(FLOAT_CODECS[codec]).view(rows, width))
        return out
    bits = int(codec[3:])
    if _triton(records) and out.dtype == torch.float32 and out.is_contiguous():
        kernels.triton().decode_rows(records, bits, out.view(rows, width))
        return out
    if _fused(records) and out.dtype == torch.float32 and out.is_contiguous():
        r = records.numpy()
        kernels.load().decode_into(r, *_split_records(r, width, bits), out.numpy(), np.arange(rows), False, bits)
        return out
    out.copy_(decode(from_rows(records, codec, width), dtype))
    return out


def decode_rows_add(records: torch.Tensor, codec: str, width: int, target: torch.Tensor,
                    index: torch.Tensor) -> torch.Tensor:
    """target[index] += decode_rows(records): received gradients summed in without a decoded copy (fused)."""
    rows = index.shape[0]
    if rows == 0:
        return target
    records = records.view(rows, -1)
    if codec not in FLOAT_CODECS and _triton(records) and target.dtype == torch.float32 and target.is_contiguous():
        kernels.triton().decode_rows(records, int(codec[3:]), target.view(target.shape[0], -1), index, add=True)
        return target
    if codec not in FLOAT_CODECS and _fused(records) and target.dtype == torch.float32 and target.is_contiguous():
        r, bits = records.numpy(), int(codec[3:])
        kernels.load().decode_into(r, *_split_records(r, width, bits), target.view(target.shape[0], -1).numpy(),
                                    index.numpy(), True, bits)
        return target
    return target.index_add_(0, index, decode_rows(records, codec, width, target.dtype).view(rows, *target.shape[1:]))


def to_rows(e: Encoded) -> torch.Tensor:
    """One byte record per row, [payload | lo | scale], so a row-split all_to_all carries an int block."""
    n = e.payload.shape[0]
    if e.lo is None:
        return e.payload
    return torch.cat([e.payload, e.lo.contiguous().view(torch.uint8).view(n, 4),
                      e.scale.contiguous().view(torch.uint8).view(n, 4)], dim=1)


def from_rows(rows: torch.Tensor, codec: str, width: int) -> Encoded:
    if codec in FLOAT_CODECS:
        return Encoded(rows, None, None, width, torch.finfo(FLOAT_CODECS[codec]).bits)
    bits = int(codec[3:])
    k = packed_width(width, bits)
    lo = rows[:, k: k + 4].contiguous().view(torch.float32).view(-1)
    scale = rows[:, k + 4: k + 8].contiguous().view(torch.float32).view(-1)
    return Encoded(rows[:, :k], lo, scale, width, bits)
