"""What one rank's training step computes, and what each kind of work costs on one core (partition.costmodel
prices the ranks, their meetings and the epoch from these).

A GCN layer plan (`layers`: widths, which product is exchanged, which runs backward) and, per part, its work in
three kinds: sparse multiply-adds (`sparse_seconds`: reads of rows that stay in the rank's cache share at the
profile's hot rate, the rest at its rate from memory), dense flops (`dense_seconds`, at each layer's widths)
and elementwise values (`elementwise_seconds`: dropout, ReLU, bias, the features' dropout forward only).
torch-free, as partition.costmodel is.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from partition.machine import Machine

BYTES_PER_VALUE = 4  # fp32 rows in memory (what a sparse product reads)


@dataclass(frozen=True)
class Workload:
    """What is trained: input width, hidden width, classes, graph layers."""

    features: int
    classes: int
    hidden: int = 16
    layers: int = 2
    overlap: bool = True  # inner rows' reads aggregate while the halo travels (train's default; --no-overlap off)
    codec: str = "fp32"  # how halo rows and gradients travel (partition.wire: a fixed codec; fp32 is exact)


@dataclass(frozen=True)
class Layer:
    d_in: int
    d_out: int
    width: int  # columns of the sparse product and of the rows exchanged
    backward_sparse: bool  # the sparse product runs again backward (not for layer 0 aggregating its input)
    exchanges: int  # all-to-alls per epoch: forward, backward, both or none (layer 0's cached input)
    aggregate_first: bool = True  # the sparse product before the linear map (the input's rows exchanged)


def layers(work: Workload) -> list[Layer]:
    """Per graph layer, what it computes and exchanges in a training step (gnn_dist.nn.conv.aggregate_first)."""
    dims = [work.features] + [work.hidden] * (work.layers - 1) + [work.classes]
    out = []
    for i in range(work.layers):
        d_in, d_out = dims[i], dims[i + 1]
        first = i == 0  # its input needs no gradient
        agg_first = d_in * (1 + (not first)) <= d_out * 2
        width = d_in if agg_first else d_out
        cached = first and agg_first  # the input features' halo is fetched once, and no gradient goes back
        out.append(Layer(d_in, d_out, width, backward_sparse=not cached, exchanges=0 if cached else 2,
                         aggregate_first=agg_first))
    return out


def hot_reads(top: Sequence[int], threshold: float, num_rows: int = 0) -> float:
    """Reads of the rows read at least `threshold` times each, from `top_reads`' curve: its steps (the 2nd
    row, the 3rd and 4th, the 5th to 8th, ...) count whole when their mean reads per row reach it. The last
    step ends at the part's last row (`num_rows`, its inner and halo rows, where known): 38,919 rows read
    make a last step of 6,151, whose mean taken over 32,768 was a fifth of what it is."""
    hot, prev = 0.0, 0
    for j, cum in enumerate(top):
        rows = 1 if j == 0 else 1 << (j - 1)
        if num_rows > rows:
            rows = min(rows, num_rows - rows)  # rows 2^(j-1) + 1 to min(2^j, num_rows)
        if (cum - prev) / rows < threshold:
            break
        hot, prev = float(cum), cum
    return hot


def sparse_seconds(part: Mapping, layer: Layer, machine: Machine, sharing: int = 1) -> float:
    """One sparse product of `layer` on one core: its reads of rows in cache at the hot rate, the rest at the
    random-column rate. A row stays in cache (least recently used goes first) while the bytes read between
    two of its reads fit the rank's share of it (the last-level cache over the `sharing` ranks of a host):
    with a row's share of the reads f, 1 / f reads of row_bytes each, so the rows read at least
    reads x row_bytes / share times. Parts without `top_reads` (older partitions) read every row cold. A
    profile with a per-row rate (`sparse_row_per_core`) adds each output row's own work, whatever its edges.
    Each kind of read gains from the layer's width at its own measured ratio (`Machine.width_speedup`); the
    per-row work takes the ratio of reads from memory, as before (its width ratio is not measured apart)."""
    reads = float(part["edges"]) + float(part["inner"])  # the operator's edges and the self loops
    top = part.get("top_reads")
    hot = 0.0
    if top and machine.cache_bytes:
        share = machine.cache_bytes / sharing
        rows = int(part["inner"]) + int(part["halo"])  # what top_reads counted: every row the product reads
        hot = min(reads, hot_reads(top, reads * layer.width * BYTES_PER_VALUE / share, rows))
    per_row = float(part["inner"]) / machine.sparse_row_per_core if machine.sparse_row_per_core else 0.0
    speedup, hot_speedup = machine.width_speedup("sparse", layer.width), machine.width_speedup("sparse_hot", layer.width)
    rest = (reads - hot) / machine.sparse_per_core + per_row
    if hot_speedup == speedup:  # one ratio (a profile without the hot wide rate): the same floats as before it
        return (hot / machine.hot_rate + rest) * layer.width / speedup
    return (hot / machine.hot_rate / hot_speedup + rest / speedup) * layer.width


def dense_speedup(layer: Layer, machine: Machine, rows: float = 0.0, sharing: int = 0) -> float:
    """How much faster than the profile's mean rate `layer`'s dense products run, at its widths, and on `rows`
    rows whose wider operand fits the cache share of a rank among `sharing` (0: not asked, as for a node's
    weight). Callers divide the flops by it, then by `dense_per_core`: at 1.0 (a profile without wide rates)
    exactly as before."""
    cached = sharing > 0 and machine.fits(rows * max(layer.d_in, layer.d_out) * BYTES_PER_VALUE, sharing)
    return machine.width_speedup("dense", math.sqrt(layer.d_in * layer.d_out), cached)


def dense_seconds(rows: float, plan: Sequence[Layer], machine: Machine, sharing: int = 0) -> float:
    """A step's dense products on `rows` rows at one core, each layer at its widths' rate (`dense_speedup`)."""
    return sum(dense_flops(rows, la, i) / dense_speedup(la, machine, rows, sharing)
               for i, la in enumerate(plan)) / machine.dense_per_core


def elementwise_seconds(part: Mapping, plan: Sequence[Layer], machine: Machine, sharing: int) -> list[tuple]:
    """Per layer, one direction's elementwise passes at one core, as `rank_work` counts them: on its input (the
    first layer's with its halo rows) and on its output, a tensor that fits the rank's cache share at the
    profile's cached rate (`Machine.elementwise_rate`). The first layer's input pass runs forward only
    (`input_passes`)."""
    inner, halo = float(part["inner"]), float(part["halo"])
    out = []
    for i, la in enumerate(plan):
        v_in, v_out = (inner + (halo if i == 0 else 0.0)) * la.d_in, inner * la.d_out
        out.append((v_in / machine.elementwise_rate(v_in * BYTES_PER_VALUE, sharing),
                    v_out / machine.elementwise_rate(v_out * BYTES_PER_VALUE, sharing)))
    return out


def dense_flops(rows: float, layer: Layer, index: int) -> float:
    """A step's dense flops of `layer` (the `index`-th) on `rows` rows: forward, the weight's gradient and, past
    the first layer, the input's."""
    return 2.0 * rows * layer.d_in * layer.d_out * (2 + (index > 0))


def input_passes(index: int) -> int:
    """Elementwise passes over the `index`-th layer's input a step makes: its dropout forward and backward, but
    the features' (the first layer's, with their halo rows) forward only: they need no gradient, so autograd
    runs no backward through their dropout (gnn_dist.nn.dropout.input_dropout). Counting two had priced R-MAT's
    2-part default, 43% of whose part 0's input rows are halo rows, one 0.11 s pass too many an epoch."""
    return 1 if index == 0 else 2


def rank_work(part: Mapping, plan: Sequence[Layer]) -> tuple[float, float, float]:
    """(sparse multiply-adds, dense flops, elementwise values) of one training step on one part."""
    inner, edges, halo = float(part["inner"]), float(part["edges"]), float(part["halo"])
    sparse = dense = elem = 0.0
    for i, layer in enumerate(plan):
        sparse += (edges + inner) * layer.width * (1 + layer.backward_sparse)
        dense += dense_flops(inner, layer, i)
        # dropout (and ReLU) of the input, bias of the output, each forward and backward (the features: forward)
        elem += input_passes(i) * (inner + (halo if i == 0 else 0.0)) * layer.d_in + 2.0 * inner * layer.d_out
    return sparse, dense, elem
