"""Adaptive bit-widths (AdaQP-style, docs/design.md §5), solved identically on every rank.

Each (channel, sender, receiver) group g has a quantisation variance
var_g(b) = R_g * width / (6 (2^b - 1)^2), R_g = sum over its rows of (max - min)^2
(stochastic rounding of a uniform fraction has variance step^2 / 6 on average),
and costs bytes_g(b) on its link. A link model time = alpha * bytes + beta,
fitted per directed link at start-up (`Wire.measure_links`), turns bytes into seconds. Links share
interfaces: a sender's egress and a receiver's ingress each carry the sum of
their links. No interface may take longer than it would at uniform
int<budget_bits>; within that, bits go where they remove the most variance
per second of link time (greedy upgrades 2 -> 4 -> 8).
Statistics are all-gathered first, so every rank computes the same table.
"""
from __future__ import annotations

import heapq

import torch

from gnn_dist.runtime import codec, tuning
from partition.errors import UsageError


def variance(r: float, width: int, bits: int) -> float:
    return r * width / (6.0 * (2**bits - 1) ** 2)


def rounding_variance(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Per-element variance of stochastic rounding, scale^2 p (1 - p): what the adaptive policy minimises."""
    x = x.double()
    lo = x.amin(dim=1, keepdim=True)
    scale = (x.amax(dim=1, keepdim=True) - lo) / (2**bits - 1)
    v = (x - lo) / torch.where(scale == 0, torch.ones_like(scale), scale)
    p = v - v.floor()
    return scale**2 * p * (1 - p)


def solve_bits(groups: dict, links: dict, budget_bits: int) -> dict:
    """groups: {(channel, src, dst): (R, rows, width)}; links: {(src, dst): (alpha, beta)} -> {group: bits}.

    Every interface carries the sum of its links: a sender's egress at each
    link's own speed, a receiver's ingress at the speed of its fastest link
    in (what its own interface can take). Each interface's budget is its own
    time at uniform int<budget_bits>, so no link ends up slower than uniform
    int<budget_bits> would make it; bits only move between the groups that
    share interfaces. (A budget of the busiest interface's time, letting the
    others fill up to it, made the whole epoch as slow as the noisiest link
    measurement on a busy host.) From int2 everywhere, upgrades are taken
    greedily by variance removed per second of link time while both ends
    stay within budget; a group's next upgrade removes less per second than
    its last, so one heap pass finds the greedy order, and an upgrade that
    does not fit never fits later (loads only grow).
    """
    live = {g: v for g, v in groups.items() if v[1]}
    if not live:
        return {}
    net = _Interfaces(live, links)
    budget_out, budget_in = net.loads(lambda g: budget_bits)
    slack = 1 + 1e-9
    bits = {g: codec.INT_BITS[-1] for g in live}
    out, inn = net.loads(bits.__getitem__)
    heap = [s for s in (net.upgrade(g, bits[g]) for g in sorted(live)) if s is not None]
    heapq.heapify(heap)
    while heap:
        _, g = heapq.heappop(heap)
        (e0, i0), (e1, i1) = net.cost(g, bits[g]), net.cost(g, 2 * bits[g])
        if out[g[1]] - e0 + e1 > budget_out[g[1]] * slack or inn[g[2]] - i0 + i1 > budget_in[g[2]] * slack:
            continue
        out[g[1]] += e1 - e0
        inn[g[2]] += i1 - i0
        bits[g] *= 2
        nxt = net.upgrade(g, bits[g])
        if nxt is not None:
            heapq.heappush(heap, nxt)
    return bits


class _Interfaces:
    """The link model solve_bits budgets with: each group's seconds at its sender's egress and receiver's ingress."""

    def __init__(self, live: dict, links: dict):
        self.live = live
        self.alpha = {g: links.get((g[1], g[2]), (1.0, 0.0))[0] for g in live}
        self.beta = {g: links.get((g[1], g[2]), (1.0, 0.0))[1] for g in live}
        self.alpha_in: dict = {}
        for g in live:
            self.alpha_in[g[2]] = min(self.alpha_in.get(g[2], float("inf")), self.alpha[g])

    def cost(self, g, bits: int) -> tuple[float, float]:
        """(egress seconds at the sender, ingress seconds at the receiver) of group g at `bits`."""
        b = codec.wire_bytes(self.live[g][1], self.live[g][2], f"int{bits}")
        return self.alpha[g] * b + self.beta[g], self.alpha_in[g[2]] * b + self.beta[g]

    def loads(self, bits_of) -> tuple[dict, dict]:
        out, inn = {}, {}
        for g in self.live:
            e, i = self.cost(g, bits_of(g))
            out[g[1]], inn[g[2]] = out.get(g[1], 0.0) + e, inn.get(g[2], 0.0) + i
        return out, inn

    def upgrade(self, g, b: int) -> tuple | None:
        """Heap entry for doubling g's bits from b: (minus variance removed per second of link time, g)."""
        if b == codec.INT_BITS[0]:
            return None
        r, rows, width = self.live[g]
        d_var = variance(r, width, b) - variance(r, width, 2 * b)
        d_bytes = codec.wire_bytes(rows, width, f"int{2 * b}") - codec.wire_bytes(rows, width, f"int{b}")
        return (-d_var / (max(d_bytes, 1) * self.alpha[g]), g)


class AdaptivePolicy:
    """Per-rank view: local statistics in, the global bit table out."""

    def __init__(self, wire, config, num_peers: int):
        """`config.links`: the link model, measured once where the part is loaded (`Wire.measure_links`); a plan
        with no peer needs none. Building a policy runs no collective."""
        if not config.links and num_peers > 1:
            raise UsageError("adaptive bit-widths need the link model: set ExchangeConfig.links from "
                             "Wire.measure_links() (load_partition does)")
        self.wire, self.config = wire, config
        self.local: dict = {}  # (channel, dst) -> (R, rows, width); R a device tensor until solved
        self.table: dict = {}  # (channel, src, dst) -> bits
        self.links = dict(config.links or {})
        self.solved_at = -1

    def observe(self, channel: str, dst: int, width: int, scale: torch.Tensor, bits: int) -> None:
        rng = scale.double() * (2**bits - 1)
        self.local[(channel, dst)] = ((rng * rng).sum(), int(scale.shape[0]), int(width))

    def codec_for(self, channel: str, src: int, dst: int) -> str:
        return f"int{self.table.get((channel, src, dst), tuning.ADAPTIVE_START_BITS)}"

    def maybe_solve(self, epoch: int) -> None:
        every = self.config.adaptive_every
        if epoch == self.solved_at or not (epoch == 1 or (epoch > 1 and epoch % every == 0)):
            return
        if any(r.is_cuda for r, _, _ in self.local.values()):  # summed on the exchange's side stream
            torch.cuda.synchronize()
        local = {k: (float(r), rows, width) for k, (r, rows, width) in self.local.items()}
        gathered = self.wire.gather_objects(local)
        groups = {(ch, src, dst): v for src, loc in enumerate(gathered) for (ch, dst), v in loc.items()}
        self.table = solve_bits(groups, self.links, self.config.budget_bits)
        self.solved_at = epoch

    def drain(self) -> None:
        """Nothing to wait for: the policy only reads scales, and solves in a blocking gather."""

    def tensors(self) -> list:
        """The statistics kept for the next solve (device tensors until then)."""
        return [r for r, _, _ in self.local.values()]

    def state_dict(self) -> dict:
        """The bit table, the statistics of the next solve, when it last solved, and the link model it budgets
        with (measured at start-up: a resumed run would otherwise budget with other numbers)."""
        return {"table": dict(self.table), "solved_at": int(self.solved_at),
                "links": {k: (float(a), float(b)) for k, (a, b) in self.links.items()},
                "local": {k: (torch.as_tensor(r).detach().double().cpu(), int(rows), int(width))
                          for k, (r, rows, width) in self.local.items()}}

    def load_state_dict(self, state: dict, device) -> None:
        self.table, self.solved_at, self.links = dict(state["table"]), state["solved_at"], dict(state["links"])
        self.local = {k: (r.to(device), rows, width) for k, (r, rows, width) in state["local"].items()}
