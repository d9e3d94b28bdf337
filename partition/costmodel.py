"""A cost model of one training epoch per rank: the busiest rank sets the epoch.

From a partition's counts per part (inner rows, central rows, halo rows received, rows sent, edges) and
the model's widths and depth, it counts each rank's work in three kinds (sparse multiply-adds, dense
flops, elementwise values) and its wire bytes per exchange, then prices them with a machine profile
(partition.machine):

- compute = work at one core's rates over the rank's threads (cores per host / ranks per host), with what the
  bytes sent and received cost the rank's CPU where the profile measured it (`wire_cpu_seconds`), plus the
  step's fixed cost (Python, autograd, optimiser) on one thread;
- a sparse product is bound by where its source rows come from (a roofline with two roofs): a read of a
  row in cache costs a few cycles, a read from memory a cache miss per row. A row stays in cache while
  what the product reads between two of its reads fits the rank's share of the host's last-level cache
  (the profile's `cache_bytes` over the ranks on the host), so only rows read
  often enough are hot (`sparse_seconds`; their reads counted from the part's own in-degrees,
  `top_reads`): they go at `sparse_hot_per_core`, the rest at `sparse_per_core` (uniformly random
  columns). A power-law part's hubs are read hot, a uniform part of the same size is all cold. The
  backward product is priced like the forward one (GCN's graphs are symmetric: the same rows are hubs);
- each layer at its width: a profile's rates are means its narrow products dominate, and a 128-wide layer
  runs its sparse and dense products faster per column (`Machine.width_speedup`, from the profile's wide
  rates where measured);
- wire = per exchange, latency per peer + max(bytes in, bytes out) / link rate, and the gradients'
  all-reduce (latency per peer), less what the product reads of inner rows meanwhile (`overlapped_share`);
  only the unhidden rest counts. A link shaped by a token bucket (the network lab's tc tbf) passes what
  its bucket holds (up to `link_burst_bytes`) at line speed, the bucket refilling at the link's rate while
  the rank computes between meetings;
- the epoch in phases (`rank_phases`, partition.phases): each all-to-all and the all-reduce is a meeting
  no rank passes before the last has arrived, so the epoch is, phase by phase, the last arrival plus the
  meeting; ranks sharing a host's cores share them by processor sharing (n ranks on C < n cores at C / n
  of a core each until one finishes). A profile measured among the ranks carries `epoch_fixed_s`, what
  an epoch costs whatever the graph (Python, autograd, the exchange's machinery, the meetings' wake-ups):
  it is added, and the phases then price the graph's work alone (without: `step_s` spread over the
  phases, and the latency).

The layer order follows gnn_dist.nn.conv.aggregate_first (GCN's: a layer exchanges the narrower of its
input and output), and the first layer's input halo is fetched once (the input cache), so it costs
nothing per epoch. The step's work and each kind's price at one core (`layers`, `sparse_seconds`,
`dense_seconds`, `elementwise_seconds`) live in partition.step_work; this module prices the ranks, their
meetings and the epoch. torch-free, so `gnn-dist partition` can use it; the runtime imports it too.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from partition.machine import Machine
from partition.phases import Phase, epoch
from partition.step_work import (
    Layer,
    Workload,
    dense_seconds,
    dense_speedup,
    elementwise_seconds,
    input_passes,
    layers,
    sparse_seconds,
)
from partition.wire import for_width, row_bytes


@dataclass(frozen=True)
class RankCost:
    rank: int
    sparse_s: float
    dense_s: float
    elementwise_s: float
    compute_s: float  # the three above and the wire's CPU (`wire_cpu_seconds`), on this rank's threads
    wire_s: float  # unhidden wire time
    epoch_s: float  # compute + wire


@dataclass(frozen=True)
class Prediction:
    ranks: list[RankCost]
    host_floor_s: float  # the busiest host's total work over its cores: a bound no epoch beats
    epoch_s: float
    busiest: int
    bottleneck: str  # "compute", "wire", "shared cores" or "fixed epoch": the largest of the epoch's four terms
    sharing_s: float = 0.0  # what ranks sharing a host's cores add to the phases (partition.phases)
    meetings_s: float = 0.0  # the meetings' time beyond what ranks compute meanwhile (and the fixed epoch's)
    fixed_s: float = 0.0  # the profile's fixed epoch (`epoch_fixed_s`), included in epoch_s

    def summary(self) -> str:
        """One line: the predicted epoch, the busiest rank and what holds it."""
        r = self.ranks[self.busiest]
        why = {"compute": f"compute {r.compute_s:.4g} s (at one core: sparse {r.sparse_s:.4g}, dense "
                          f"{r.dense_s:.4g}, elementwise {r.elementwise_s:.4g} s, and the wire's CPU where "
                          f"measured) + unhidden wire {r.wire_s:.4g} s",
               "wire": f"unhidden wire {r.wire_s:.4g} s + compute {r.compute_s:.4g} s",
               "shared cores": f"its host's cores are shared: waiting for a core adds {self.sharing_s:.4g} s to "
                               f"the phases (rank {self.busiest} alone: {r.epoch_s:.4g} s; the host's work over its "
                               f"cores {self.host_floor_s:.4g} s)",
               "fixed epoch": f"what every epoch costs among these ranks whatever the graph (Python, autograd, "
                              f"the exchange's machinery, wake-ups), {self.fixed_s:.4g} s, outweighs the graph's "
                              f"work: more nodes per rank would cost little more"}
        mean = sum(x.epoch_s for x in self.ranks) / len(self.ranks)
        fixed = (f"; and every epoch's fixed cost among these ranks, {self.fixed_s:.4g} s"
                 if self.fixed_s and self.bottleneck != "fixed epoch" else "")
        return (f"predicted epoch {self.epoch_s:.4g} s; busiest rank {self.busiest} ({r.epoch_s / mean:.2f}x the "
                f"mean rank), bottleneck {self.bottleneck}: {why[self.bottleneck]}{fixed}")


def _threads(machine: Machine, num_parts: int) -> tuple[int, int]:
    """(ranks on one host, threads per rank): the launcher gives each rank its share of the host's cores, whole,
    at least 1 (a host of 0.22 core runs one thread, which `epoch` then runs at 0.22 of a core)."""
    per_host = num_parts if machine.ranks_per_host == 0 else min(machine.ranks_per_host, num_parts)
    return per_host, max(1, int(machine.cores_per_host // per_host))


def _layer_seconds(part: Mapping, plan: Sequence[Layer], machine: Machine, sharing: int) -> list[tuple]:
    """Per layer, one direction's seconds at one core: (sparse product, dense product, elementwise on its
    input, elementwise on its output), as `rank_work` counts them."""
    inner = float(part["inner"])
    return [(sparse_seconds(part, la, machine, sharing),
             2.0 * inner * la.d_in * la.d_out / dense_speedup(la, machine, inner, sharing) / machine.dense_per_core,
             e_in, e_out) for la, (e_in, e_out) in zip(plan, elementwise_seconds(part, plan, machine, sharing))]


def rank_phases(part: Mapping, plan: Sequence[Layer], machine: Machine, sharing: int, peers: int,
                overlap: bool, fixed_s: float = 0.0, threads: float = 1, codec: str = "fp32") -> list[Phase]:
    """One rank's step as phases that end in meetings, at one core, in gnn_dist's order (nn.models,
    nn.message_passing.HaloSpMM): forward layer by layer, an exchanged layer's all-to-all starting before
    its product (after the linear map when it transforms first) and the inner rows' share of the
    product computed while the rows travel, the rest after; backward in reverse, the halo rows' share of
    the transposed product before its all-to-all; then the gradients' all-reduce (the optimiser after it
    runs into the next step's first phase). Its work sums to `rank_work`'s, each layer at its width's rates
    (`Machine.width_speedup`), plus the wire's CPU while each meeting's rows travel (`wire_cpu_seconds`). A
    token-bucket link refills while the rank computes (on its `threads`, times its host's speed where it has
    less than a core: wall seconds, not one core's), and during its share of the step's fixed cost and of
    the epoch's (`step_s`, `fixed_s`, spread evenly). Rows travel in `codec`."""
    c = overlapped_share(part) if overlap else 0.0
    rows = max(float(part["halo"]), float(part.get("sent", part["halo"])))
    out: list[Phase] = []
    sizes: list[float] = []  # bytes each meeting sends (the larger of in and out)
    cur = 0.0

    def meet(before: float, during: float, width: int) -> None:
        # the bytes' CPU (gloo, the network stack in the rank's time) runs while they travel
        out.append(Phase(cur + before, during + wire_cpu_seconds(part, width, machine, codec)))
        sizes.append(rows * row_bytes(width, for_width(codec, width)))

    terms = _layer_seconds(part, plan, machine, sharing)
    for la, (s, d, e_in, e_out) in zip(plan, terms):  # forward
        if not la.exchanges:
            cur += e_in + s + d + e_out
            continue
        meet(e_in + (0.0 if la.aggregate_first else d), c * s, la.width)
        cur = (1 - c) * s + e_out + (d if la.aggregate_first else 0.0)
    for i in reversed(range(len(plan))):  # backward
        la, (s, d, e_in, e_out) = plan[i], terms[i]
        s_b, d_b = s * la.backward_sparse, d * (1 + (i > 0))  # weight gradient, and the input's after layer 0
        if not la.exchanges:
            cur += e_out + d_b + s_b + e_in * (input_passes(i) - 1)
            continue
        meet(e_out + (1 - c) * s_b + (d_b if la.aggregate_first else 0.0), c * s_b, la.width)
        cur = e_in * (input_passes(i) - 1) + (0.0 if la.aggregate_first else d_b)
    out.append(Phase(cur, 0.0))  # the gradients' all-reduce (a few KB)
    sizes.append(0.0)
    if not peers:
        return out
    idle = [ph.work_s / threads + (machine.step_s + fixed_s) / len(out) for ph in out]
    wires = through_bucket(sizes, idle, machine)
    return [Phase(ph.work_s, ph.overlap_s, machine.latency_s * peers + w) for ph, w in zip(out, wires)]


def wire_cpu_seconds(part: Mapping, width: int, machine: Machine, codec: str = "fp32") -> float:
    """One all-to-all's CPU at one core: the rows the rank sends and receives, `width` wide in `codec`, at the
    profile's `wire_cpu_s_per_byte` (0 where not measured)."""
    if not machine.wire_cpu_s_per_byte:
        return 0.0
    rows = float(part["halo"]) + float(part.get("sent", part["halo"]))
    return rows * row_bytes(width, for_width(codec, width)) * machine.wire_cpu_s_per_byte


def overlapped_share(part: Mapping) -> float:
    """The share of a layer's sparse product computed while its exchange travels (HaloSpMM): every read of an
    inner row, forward (the halo rows' columns wait for the rows) and backward (the halo rows' gradients go
    first, the rest meanwhile); older partitions without `halo_edges` count the central rows' share, which
    left a marginal row's inner edges out and priced the wire of parts with few central rows (an SBM's)
    mostly unhidden (docs/benchmarks.md, "The cost model and the default partition on emulated hosts")."""
    reads = float(part["edges"]) + float(part["inner"])  # the operator's edges and the self loops
    if part.get("halo_edges") is not None and reads:
        return min(1.0, max(0.0, 1.0 - float(part["halo_edges"]) / reads))
    return min(1.0, float(part["central"]) / max(float(part["inner"]), 1.0))


def through_bucket(sizes: Sequence[float], idle_s: Sequence[float], machine: Machine) -> list[float]:
    """Seconds each meeting's bytes take on the link. A link shaped by a token bucket (the network lab's tc
    tbf: `link_burst_bytes`) passes what the bucket holds at line speed and the rest at its rate; the
    bucket refills at that rate while the rank computes before the meeting (`idle_s`), up to the burst.
    The epoch repeats, so the bucket's level is taken from a second pass. The bucket refills at the link's
    configured rate where the profile has it (`link_rate_bytes_per_s`: tc tbf refills at what it was told,
    whatever gloo then gets through), and what it lacks goes at the measured rate."""
    rate, burst = machine.link_bytes_per_s, machine.link_burst_bytes
    refill = machine.link_rate_bytes_per_s or rate
    level, wires = burst, []
    for j in range(2 * len(sizes)):
        k = j % len(sizes)
        level = min(burst, level + idle_s[k] * refill)
        wires.append(max(0.0, sizes[k] - level) / rate)
        level = max(0.0, level - sizes[k])
    return wires[len(sizes):]


def _on_threads(phases: Sequence[Phase], threads: int, step_s: float) -> list[Phase]:
    """Phases at one core to seconds on the rank's threads; the step's fixed cost (one thread) spread
    evenly over them."""
    fixed = step_s / len(phases)
    return [Phase(ph.work_s / threads + fixed, ph.overlap_s / threads, ph.wire_s) for ph in phases]


def predict(parts: Sequence[Mapping], work: Workload, machine: Machine) -> Prediction:
    """Each rank's predicted epoch from its part's counts (keys inner, central, halo, edges, sent, and optionally
    halo_edges and top_reads), and the
    epoch: phase by phase, the last rank to reach each meeting, ranks sharing a host's cores
    (partition.phases).

    `sent` (rows sent per layer) falls back to `halo` when absent (older partitions); the rank's peers
    are all other ranks.
    """
    plan = layers(work)
    p = len(parts)
    per_host, threads = _threads(machine, p)
    speed = min(1.0, machine.cores_per_host / threads)  # a host of less than a core runs even one rank slower
    # a measured fixed epoch holds the step's fixed cost and the meetings' latency: the phases price the graph's work
    fixed = machine.epoch_fixed_s
    graph_only = dataclasses.replace(machine, step_s=0.0, latency_s=0.0) if fixed else machine
    ranks, one_core, phased = [], [], []
    for k, part in enumerate(parts):
        s = sum(sparse_seconds(part, la, machine, per_host) * (1 + la.backward_sparse) for la in plan)
        d = dense_seconds(float(part["inner"]), plan, machine, per_host)
        e = sum(e_in * input_passes(i) + 2.0 * e_out
                for i, (e_in, e_out) in enumerate(elementwise_seconds(part, plan, machine, per_host)))
        w = sum(la.exchanges * wire_cpu_seconds(part, la.width, machine, work.codec) for la in plan)  # the wire's CPU
        one_core.append(s + d + e + w + graph_only.step_s)
        phases = rank_phases(part, plan, graph_only, per_host, p - 1, work.overlap, fixed, threads * speed,
                             work.codec)
        phased.append(_on_threads(phases, threads, graph_only.step_s))
        # the step's fixed part runs on one thread; a measured fixed epoch holds it (added to the epoch once)
        compute = ((s + d + e + w) / threads + graph_only.step_s) / speed
        wire = sum(max(0.0, ph.wire_s - ph.overlap_s / speed) for ph in phased[-1])
        ranks.append(RankCost(k, s, d, e, compute, wire, compute + wire))
    hosts = [range(h, min(h + per_host, p)) for h in range(0, p, per_host)]
    ep = epoch(phased, hosts, machine.cores_per_host / threads)
    # no epoch is shorter than the busiest host's total work over its cores (a bound, printed beside)
    floor = max(sum(one_core[h:h + per_host]) / machine.cores_per_host for h in range(0, p, per_host))
    terms = {"shared cores": ep.sharing_s, "compute": ep.compute_s, "wire": ep.wire_s, "fixed epoch": fixed}
    bottleneck = max(terms, key=lambda t: terms[t])  # ties: the first
    busiest = max(range(p), key=lambda k: one_core[k] if bottleneck == "shared cores" else ranks[k].epoch_s)
    return Prediction(ranks, floor, ep.seconds + fixed, busiest, bottleneck, ep.sharing_s, ep.wire_s, fixed)


def node_seconds(in_degree: np.ndarray, work: Workload, machine: Machine) -> np.ndarray:
    """Each node's share of a step's compute at one core: its edges' sparse work plus its row's dense and
    elementwise work (what its owner pays for holding it)."""
    plan = layers(work)
    # a row's columns over the layers, each layer's counted at its width's speed
    sparse = sum(la.width * (1 + la.backward_sparse) / machine.width_speedup("sparse", la.width) for la in plan)
    elem = sum(input_passes(i) * la.d_in + 2.0 * la.d_out for i, la in enumerate(plan))
    per_row = dense_seconds(1.0, plan, machine) + elem / machine.elementwise_per_core + (
        sparse / machine.sparse_row_per_core if machine.sparse_row_per_core else 0.0)
    return (np.asarray(in_degree, dtype=np.float64) + 1.0) * sparse / machine.sparse_per_core + per_row


def format_ranks(pred: Prediction) -> str:
    """The per-rank table `gnn-dist partition` and `gnn-dist info` print."""
    lines = [f"{'rank':>4} {'compute s':>10} {'wire s':>10} {'epoch s':>10}"]
    lines += [f"{r.rank:>4} {r.compute_s:>10.4f} {r.wire_s:>10.4f} {r.epoch_s:>10.4f}" for r in pred.ranks]
    return "\n".join(lines)


def prediction_record(pred: Prediction, machine: Machine, work: Workload) -> dict:
    """What a training log keeps of a prediction (one JSON line), for `gnn-dist info --run`."""
    return {"prediction": {"machine": machine.name, "epoch_s": round(pred.epoch_s, 6), "busiest": pred.busiest,
                           "bottleneck": pred.bottleneck, "host_floor_s": round(pred.host_floor_s, 6),
                           "sharing_s": round(pred.sharing_s, 6), "fixed_s": round(pred.fixed_s, 6),
                           "workload": {"features": work.features, "classes": work.classes, "hidden": work.hidden,
                                        "layers": work.layers, "overlap": work.overlap, "codec": work.codec},
                           "rank_compute_s": [round(r.compute_s, 6) for r in pred.ranks],
                           "rank_wire_s": [round(r.wire_s, 6) for r in pred.ranks]}}
