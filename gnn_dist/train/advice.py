"""`gnn-dist train --exchange auto`: the exchange setting with the best predicted time to accuracy.

Time to accuracy = epochs to the target x time per epoch (`gnn_dist.train.tta`):
- epochs: each candidate's epochs to the target over exact's, as measured
  (`MEASURED`, with the command that measured it). A setting enters the list
  only once it was measured to pay in the lab; staleness and skipping pay against
  exact but were not measured to beat adaptive (docs/benchmarks.md, "Time to
  accuracy"), so today auto picks exact or adaptive.
- time per epoch: this rank's compute (its own sparse products and weight
  products, timed here at the model's widths, x 3 for backward) and its
  communication: the plan's rows per peer x the wire bytes of each layer's
  width and codec, over the link model measured at start-up (the adaptive
  policy's alpha x bytes + beta per directed link; an interface carries the
  sum of its links). A fresh exchange waits for its rows (compute +
  communication); stale forward rows (`--staleness 1`, gradients fresh) travel
  behind the whole epoch and cost only what its compute does not hide.
Every rank takes the largest of each figure over ranks, so every rank picks the same.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from gnn_dist.runtime import codec
from gnn_dist.runtime.collectives import all_sum


@dataclass(frozen=True)
class Candidate:
    name: str
    settings: dict  # ExchangeConfig fields
    epochs: float  # epochs to the target over exact's (measured: MEASURED)
    wire: str  # the codec whose bytes it costs (adaptive: its budget, uniform int4)
    stale: bool = False  # forward rows stale (gradients fresh, the default): they travel behind the whole epoch


# Measured on SBM-50k (GCN, 3 layers, hidden 128, 150 epochs; docs/benchmarks.md "Time to accuracy"): epochs
# for the validation-picked model to come within 0.3 points of exact's final test accuracy, over exact's; the
# worst of 2 ranks (26 against 27), the 4-rank lab at 1 Gbit/s (30 against 29) and the 2-rank lab at 200
# Mbit/s (30 against 30). Staleness and skipping are not candidates: they pay against exact (4 ranks at
# 1 Gbit/s: adaptive + stale1 0.39x, adaptive + skip 0.51x; 2 ranks at 200 Mbit/s: skip 0.67x), but none was
# measured faster than adaptive alone (0.41x and 0.19x), and a stale epoch saves only the compute the wire
# hides where the CPU has room, which this prediction cannot see (stale1 1.02x exact's time at 4 ranks on 2
# cores). `Candidate.stale` stays for a setting measured to beat the others later.
MEASURED = (
    Candidate("exact", {}, 1.0, "fp32"),
    Candidate("adaptive", {"codec": "adaptive"}, 1.03, "int4"),
)


WIN = 0.9  # another setting replaces exact only when predicted to reach the target in <= 0.9x exact's time


def layer_widths(num_features: int, hidden: int, num_classes: int, layers: int) -> list[tuple[int, int]]:
    """(d_in, d_out) of each layer of the built-in models."""
    dims = [num_features] + [hidden] * (layers - 1) + [num_classes]
    return list(zip(dims[:-1], dims[1:]))


def wire_widths(widths: list[tuple[int, int]], input_cache: bool) -> tuple[list[int], list[int]]:
    """Widths of the blocks one training epoch sends, (forward rows, backward gradients), as the layers
    choose them (`gnn_dist.nn.conv.aggregate_first`): the first layer's input needs no gradient, and with
    the input cache its rows travel once, not per epoch."""
    fwd, bwd = [], []
    for i, (d_in, d_out) in enumerate(widths):
        if i == 0 and d_in <= 2 * d_out:  # aggregates the input features: their rows only, no gradient
            fwd += [] if input_cache else [d_in]
        else:  # a hidden layer's rows (or XW, if narrower) forward, and their gradients back
            w = d_in if i > 0 and d_in <= d_out else d_out
            fwd, bwd = fwd + [w], bwd + [w]
    return fwd, bwd


def comm_seconds(ex, links: dict, widths: list[int], wire: str) -> float:
    """This rank's time on the wire per epoch: per block, the busier of its egress and ingress."""
    total = 0.0
    for w in widths:
        out = sum(links[(ex.rank, p)][0] * codec.wire_bytes(n, w, codec.for_width(wire, w)) + links[(ex.rank, p)][1]
                  for p, n in enumerate(ex.send_counts) if p != ex.rank and n)
        inn = sum(links[(p, ex.rank)][0] * codec.wire_bytes(n, w, codec.for_width(wire, w)) + links[(p, ex.rank)][1]
                  for p, n in enumerate(ex.recv_counts) if p != ex.rank and n)
        total += max(out, inn)
    return total


def compute_seconds(graph, widths: list[tuple[int, int]], reps: int = 2) -> float:
    """This rank's compute per epoch, estimated: each layer's sparse product (at the width it aggregates)
    and weight product, best of `reps`, x 3 (backward costs about twice forward)."""
    from gnn_dist.graph.local import spmm

    kept = ("sum", "gcn", True) in graph._ops
    op = graph.operator("sum", "gcn")
    total = 0.0
    for d_in, d_out in widths:
        w = min(d_in, d_out)
        inner, halo = torch.rand(graph.num_inner, w), torch.rand(graph.num_src - graph.num_inner, w)
        x, weight = torch.rand(graph.num_inner, d_in), torch.rand(d_in, d_out)
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            spmm(op.central, inner), spmm(op.local, inner), spmm(op.halo, halo), x @ weight
            best = min(best, time.perf_counter() - t)
        total += best
    if not kept:  # a model that aggregates otherwise should not carry a second operator
        graph._ops.pop(("sum", "gcn", True), None)
    return 3 * total


def predict(compute: float, comm: dict, cand: Candidate) -> tuple[float, float]:
    """(seconds per epoch, seconds to the target) of one candidate; comm: wire -> (forward s, backward s).
    Stale forward rows cost only what the epoch's compute does not hide."""
    fwd, bwd = comm[cand.wire]
    epoch = compute + bwd + (max(0.0, fwd - compute) if cand.stale else fwd)
    return epoch, epoch * cand.epochs


def choose(ex, graph, widths: list[tuple[int, int]], ctx, candidates=MEASURED) -> tuple[Candidate, str, dict]:
    """The candidate with the best predicted time to accuracy (the same on every rank), one line why, and
    the link model. Collective: measures the links (every rank) and agrees the estimates."""
    links = ex.wire.measure_links()
    fwd, bwd = wire_widths(widths, ex.config.input_cache)
    wires = sorted({c.wire for c in candidates})
    mine = [compute_seconds(graph, widths)] + [comm_seconds(ex, links, b, w) for w in wires for b in (fwd, bwd)]
    agreed = all_sum(torch.tensor(mine, dtype=torch.float64), ctx, op=torch.distributed.ReduceOp.MAX).tolist()
    compute, comm = agreed[0], {w: (agreed[1 + 2 * i], agreed[2 + 2 * i]) for i, w in enumerate(wires)}
    return (*pick(compute, comm, candidates), links)


def apply(ex, cand: Candidate, links: dict) -> None:
    """Switch exchange `ex`, before any training step, to `cand`'s settings (adaptive: the links measured)."""
    from gnn_dist.runtime.exchange import ExchangeConfig

    keep = {k: getattr(ex.config, k) for k in ("input_cache", "adaptive_every", "budget_bits")}
    ex.reconfigure(ExchangeConfig(**keep, **cand.settings, links=links), auto_links=links)


def adopt(ex, state: dict) -> str | None:
    """On --resume, an exchange `auto` chose: switch to the candidate the checkpoint's `state` was made under
    (timings differ between runs, so the choice may too), so that the run goes on as it was. Its name, or
    None if no candidate matches (nothing changed). Every rank holds the same settings, so all agree."""
    before, links = ex.config, ex.auto_links
    for cand in MEASURED:
        apply(ex, cand, links)
        if ex.state_mismatch(state) is None:
            return cand.name
    ex.reconfigure(before, auto_links=links)
    return None


def pick(compute: float, comm: dict, candidates=MEASURED) -> tuple[Candidate, str]:
    """The candidate of least predicted time to accuracy and one line why; exact unless another is predicted
    at least `WIN` times sooner (the prediction leaves out encoding and the runtime's overheads). Seconds are
    given to three significant digits: a small graph's wire times are microseconds, not 0.000."""
    scored = [(predict(compute, comm, c), c) for c in candidates]
    exact = next(p for p, c in scored if c.name == "exact")
    (epoch, tta), best = min(scored, key=lambda s: s[0][1] / (1.0 if s[1].name == "exact" else WIN))
    others = ", ".join(f"{c.name} {p[0]:.3g} s x {c.epochs:g}" for p, c in scored if c is not best)
    why = (f"--exchange auto: {best.name} (predicted {epoch:.3g} s/epoch x {best.epochs:g} of exact's epochs to "
           f"the target: {exact[1] / tta:.2f}x exact's speed to accuracy; compute {compute:.3g} s/epoch, "
           f"wire (forward + backward) {', '.join(f'{w} {f:.3g} + {b:.3g} s' for w, (f, b) in comm.items())}; "
           f"others: {others})")
    return best, why
