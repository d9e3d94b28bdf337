"""What a row of halo values costs on the wire in each codec: the one definition that the runtime's codec
(gnn_dist.runtime.codec packs these records) and the cost model (partition.costmodel prices them) share.
torch-free, like the rest of `partition`."""
from __future__ import annotations

FLOAT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}  # a cast: bytes per value
INT_BITS = (8, 4, 2)  # stochastic integer codes: bits per value, and a row's minimum and step (8 bytes)
CODECS = tuple(FLOAT_BYTES) + tuple(f"int{b}" for b in INT_BITS)


def packed_width(width: int, bits: int) -> int:
    """Bytes of `width` codes of `bits` each, packed whole into bytes."""
    per = 8 // bits
    return (width + per - 1) // per


def for_width(codec: str, width: int) -> str:
    """The codec a row of `width` values travels in: int8 becomes fp16 for rows of at most 8 values.

    An int8 record is width + 8 bytes (codes, then the row's min and scale),
    fp16 is 2 width: for such rows fp16 costs no more, rounds to 11 bits
    instead of 8, and is a cast rather than a quantisation (a GCN's last
    layer sends rows as wide as the class count).
    """
    return "fp16" if codec == "int8" and width <= 8 else codec


def row_bytes(width: int, codec: str) -> int:
    """Bytes one row of `width` values costs in `codec` (as named, not yet `for_width`'s choice)."""
    if codec in FLOAT_BYTES:
        return width * FLOAT_BYTES[codec]
    return packed_width(width, int(codec[3:])) + 8
