"""Adaptive bit-widths (AdaQP-style, DESIGN sec. 5), solved identically on every rank.

Each (channel, sender, receiver) group g has a quantisation variance
var_g(b) = R_g * width / (6 (2^b - 1)^2), R_g = sum over its rows of (max - min)^2
(stochastic rounding of a uniform fraction has variance step^2 / 6 on average),
and costs bytes_g(b) on its link. A link model time = alpha * bytes + beta,
fitted per directed link at start-up, turns bytes into seconds. A sender's
links share its network interface, so a sender's time is the sum over its
links. The budget is the time the busiest sender needs at uniform
int<budget_bits>; every sender may spend up to that, so none becomes the new
bottleneck, and within it bits go where they remove the most variance per
second of link time (greedy upgrades 2 -> 4 -> 8).
Statistics are all-gathered first, so every rank computes the same table.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from gnn_dist import codec

START_BITS = 8  # before the first solve: int8 everywhere


def variance(r: float, width: int, bits: int) -> float:
    return r * width / (6.0 * (2**bits - 1) ** 2)


def solve_bits(groups: dict, links: dict, budget_bits: int) -> dict:
    """groups: {(channel, src, dst): (R, rows, width)}; links: {(src, dst): (alpha, beta)} -> {group: bits}."""
    by_link: dict = {}  # by sender: its links share one interface
    for g, (r, rows, width) in groups.items():
        if rows:
            by_link.setdefault(g[1], []).append(g)

    def link_time(sender, bits_of) -> float:
        total = 0.0
        for g in by_link[sender]:
            alpha, beta = links.get((g[1], g[2]), (1.0, 0.0))
            total += alpha * codec.wire_bytes(groups[g][1], groups[g][2], f"int{bits_of(g)}") + beta
        return total

    if not by_link:
        return {}
    budget = max(link_time(link, lambda g: budget_bits) for link in by_link)
    bits = {}
    for link in sorted(by_link):
        gs = sorted(by_link[link])
        cur = {g: codec.INT_BITS[-1] for g in gs}
        while True:
            best, best_gain = None, 0.0
            for g in gs:
                b = cur[g]
                if b == codec.INT_BITS[0]:
                    continue
                nb = b * 2
                r, rows, width = groups[g]
                d_var = variance(r, width, b) - variance(r, width, nb)
                d_bytes = codec.wire_bytes(rows, width, f"int{nb}") - codec.wire_bytes(rows, width, f"int{b}")
                gain = d_var / (max(d_bytes, 1) * links.get((g[1], g[2]), (1.0, 0.0))[0])  # per second of link
                trial = {**cur, g: nb}
                if gain > best_gain and link_time(link, trial.__getitem__) <= budget * (1 + 1e-9):
                    best, best_gain = g, gain
            if best is None:
                break
            cur[best] *= 2
        bits.update(cur)
    return bits


class AdaptivePolicy:
    """Per-rank view: local statistics in, the global bit table out."""

    def __init__(self, exchange, config):
        self.ex, self.config = exchange, config
        self.local: dict = {}  # (channel, dst) -> (R, rows, width); R a device tensor until solved
        self.table: dict = {}  # (channel, src, dst) -> bits
        self.links = self.measure_links()
        self.solved_at = -1

    def observe(self, channel: str, dst: int, width: int, scale: torch.Tensor, bits: int) -> None:
        rng = scale.double() * (2**bits - 1)
        self.local[(channel, dst)] = ((rng * rng).sum(), int(scale.shape[0]), int(width))

    def codec_for(self, channel: str, src: int, dst: int) -> str:
        return f"int{self.table.get((channel, src, dst), START_BITS)}"

    def maybe_solve(self, epoch: int) -> None:
        every = self.config.adaptive_every
        if epoch == self.solved_at or not (epoch == 1 or (epoch > 1 and epoch % every == 0)):
            return
        gathered = [None] * dist.get_world_size(self.ex.group)
        local = {k: (float(r), rows, width) for k, (r, rows, width) in self.local.items()}
        dist.all_gather_object(gathered, local, group=self.ex.group)
        groups = {(ch, src, dst): v for src, loc in enumerate(gathered) for (ch, dst), v in loc.items()}
        self.table = solve_bits(groups, self.links, self.config.budget_bits)
        self.solved_at = epoch

    def measure_links(self, sizes=(1 << 16, 1 << 20), reps: int = 3) -> dict:
        """Fit time = alpha * bytes + beta per directed link, one permutation round per peer offset."""
        world = dist.get_world_size(self.ex.group)
        me = self.ex.rank
        mine = {}
        for off in range(1, world):
            dst, src = (me + off) % world, (me - off) % world
            times = []
            for n in sizes:
                send = torch.zeros(n, dtype=torch.uint8, device=self.ex.device)  # NCCL needs device buffers
                recv = torch.empty(n, dtype=torch.uint8, device=self.ex.device)
                splits_in = [n if p == dst else 0 for p in range(world)]
                splits_out = [n if p == src else 0 for p in range(world)]
                best = float("inf")
                for _ in range(reps):
                    dist.barrier(group=self.ex.group)
                    t = time.perf_counter()
                    dist.all_to_all_single(recv, send, splits_out, splits_in, group=self.ex.group)
                    if send.is_cuda:
                        torch.cuda.synchronize(send.device)
                    best = min(best, time.perf_counter() - t)
                times.append(best)
            alpha = max((times[1] - times[0]) / (sizes[1] - sizes[0]), 1e-12)
            beta = max(times[0] - alpha * sizes[0], 0.0)
            mine[(me, dst)] = (alpha, beta)
        gathered = [None] * world
        dist.all_gather_object(gathered, mine, group=self.ex.group)
        return {k: v for d in gathered for k, v in d.items()}
