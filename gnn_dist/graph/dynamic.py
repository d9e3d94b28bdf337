"""One rank's view of a dynamic graph: a LocalGraph per snapshot, derived from the stored differences.

Two ways to get snapshot t's plan (docs/design.md §8):
- `incremental`: apply the stored differences of t to the plan of t-1 (edges,
  halo rows, send rows, marginal rows); no communication, and a snapshot that
  differs from the previous in nothing reuses its graph and operators outright.
- `rebuild`: derive the halo, marginal rows and send plan of t from its edges
  alone, agreeing the send plan with the peers by an all-to-all of requested
  rows each snapshot (what a system without stored plans must do).
Both keep only one snapshot's structures alive unless `cache` keeps them all.

Rows of a snapshot's LocalGraph are the inner rows in the order
[central at t | marginal at t], so the usual overlapped product applies; `perm`
maps them back to the fixed union order in which node series and state live.
"""
from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np
import torch

from gnn_dist.graph.local import LocalGraph
from gnn_dist.graph.snapshot_group import SnapshotGraph, SnapshotGroup, block_diagonal
from gnn_dist.runtime import transport
from gnn_dist.runtime.exchange import ExchangeConfig, HaloExchange, HaloPlan, Wire
from gnn_dist.runtime.launch import DistContext, wrong_rank_count
from partition.errors import PartitionFormatError, UsageError
from partition.graph import concat_ranges
from partition.store import ragged_item, read_meta, read_part, read_snapshots

MODES = ("incremental", "rebuild")


class SnapshotSequence:
    def __init__(self, path: str | Path, ctx: DistContext, exchange: ExchangeConfig | None = None,
                 overlap: bool = True, mode: str = "incremental", cache: bool = True, verify: bool = True):
        if mode not in MODES:
            raise ValueError(f"unknown plan mode '{mode}' (choose from {', '.join(MODES)})")
        meta = read_meta(path)
        if "num_snapshots" not in meta:
            raise PartitionFormatError(f"{path} holds a static graph; dynamic models need a partition of snapshots")
        if meta["num_parts"] != ctx.world_size:
            raise wrong_rank_count(ctx.world_size, str(path), meta["num_parts"])
        self.meta, self.ctx, self.mode, self.cache, self.overlap = meta, ctx, mode, cache, overlap
        self.config = (exchange or ExchangeConfig()).validate()
        # adaptive bits, staleness and skipping keep per-channel state in each snapshot's (and group's) exchange
        # across epochs: every snapshot then gets its own exchange, and the links are measured once, not per exchange
        c = self.config
        self.stateful = ctx.world_size > 1 and (c.codec == "adaptive" or c.staleness > 0 or c.skip_threshold > 0)
        if self.stateful and not cache:
            raise UsageError("adaptive bit-widths, staleness and skipping keep state per snapshot group across "
                             "epochs, so they need the plan cache (drop --no-plan-cache)")
        plan = read_part(path, ctx.rank, meta, verify=verify)
        self.diffs = read_snapshots(path, ctx.rank, meta)
        self.num_snapshots, self.num_train = int(meta["num_snapshots"]), int(meta["num_train_snapshots"])
        self.task, self.num_classes = meta["task"], int(meta["num_classes"])
        self.num_inner, self.num_local = plan.num_inner, int(plan.global_ids.shape[0])
        self.global_ids = plan.global_ids
        dev = ctx.device
        self.x = torch.from_numpy(np.ascontiguousarray(np.asarray(plan.x).transpose(1, 0, 2))).to(dev)  # [T, n, F]
        self.y = torch.from_numpy(np.ascontiguousarray(np.asarray(plan.y).T)).to(dev)  # [T, n]
        self.union_send_idx = plan.send_idx
        self.send_peer = np.repeat(np.arange(ctx.world_size), plan.send_counts)
        self.halo_owner = np.repeat(np.arange(ctx.world_size), plan.recv_counts)
        self.send_bounds = np.concatenate(([0], np.cumsum(plan.send_counts)))
        self.recv_bounds = np.concatenate(([0], np.cumsum(plan.recv_counts)))
        # one transport for every snapshot's and group's exchange, agreed here from the union plan (a snapshot's
        # halo is part of it): exchanges are built apart on each rank, where no collective may run
        self.wire = None
        if ctx.world_size > 1:
            self.wire = Wire.agree(ctx.halo_group, ctx.rank, ctx.device,
                                   max(int(np.sum(plan.recv_counts)), int(plan.send_idx.shape[0])))
            self.config = self.wire.with_links(c, ctx.world_size)
        self._cached: list[SnapshotGraph] = []
        self._groups: dict[tuple[int, int], SnapshotGroup] = {}  # block-diagonal groups by span, kept with the cache
        self.plan_seconds = 0.0  # time spent deriving plans, summed over all passes
        self._seen: dict[int, HaloExchange] = {}  # exchanges used since the last `take_traffic`
        self.loop_ends_steps = False  # a loop ends every step (`HaloExchange.end_step`): tell each exchange
        self._last: SnapshotGraph | None = None  # the snapshot most recently handed out
        self._resume: tuple | None = None  # derivation state after the last cached snapshot

    @property
    def num_features(self) -> int:
        return int(self.x.shape[2])

    # --------------------------------------------------------------- passes
    def __iter__(self):
        """Snapshots 0..T-1 in order (a pass re-derives them unless cached).

        With the cache, a pass that stopped early (training stops at the last
        training snapshot) is resumed from where derivation stopped.
        """
        if not self.cache or not self._cached:
            self._cached = []
            self._resume = (np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(self.num_local - self.num_inner, bool),
                            np.zeros(self.union_send_idx.shape[0], bool), np.zeros(self.num_inner, bool), None)
        for sg in list(self._cached):
            self._use(sg.graph.exchange)  # this epoch's traffic, and its steps ended by the loop
            yield sg
        key, w, recv, send, marg, prev = self._resume
        for t in range(len(self._cached), self.num_snapshots):
            t0 = time.perf_counter()
            d = self.diffs
            part = lambda name: ragged_item(d[name], d[name + "_off"], t)
            unchanged = (self.mode == "incremental" and t > 0 and not any(part(n).size for n in ("add_key", "del_key", "rew_key"))
                         and np.array_equal(d["in_weight"][t], d["in_weight"][t - 1])
                         and np.array_equal(d["self_loop"][t], d["self_loop"][t - 1]))
            if part("del_key").size:  # stored keys are sorted: delete and insert by position, no sort
                gone = np.searchsorted(key, part("del_key"))
                key, w = np.delete(key, gone), np.delete(w, gone)
            if part("rew_key").size:
                w = w.copy()
                w[np.searchsorted(key, part("rew_key"))] = part("rew_w")
            if part("add_key").size:
                at = np.searchsorted(key, part("add_key"))
                key, w = np.insert(key, at, part("add_key")), np.insert(w, at, part("add_w"))
            if self.mode == "incremental":
                if unchanged and prev is not None:
                    sg = prev if not self.stateful else own_exchange(prev)
                else:
                    recv, send, marg = recv.copy(), send.copy(), marg.copy()
                    for arr, name in ((recv, "recv_flip"), (send, "send_flip"), (marg, "marg_flip")):
                        arr[part(name)] ^= True
                    sg = self._graph(t, key, w, recv, send, marg)
            else:
                recv, send, marg = self._derive(key)
                sg = self._graph(t, key, w, recv, send, marg)
            self.plan_seconds += time.perf_counter() - t0
            prev = self._last = sg
            self._use(sg.graph.exchange)
            if self.cache:
                self._cached.append(sg)
                self._resume = (key, w, recv, send, marg, prev)
            yield sg

    def groups(self, spans: list[tuple[int, int]]):
        """(t0, t1, SnapshotGroup) for consecutive spans from snapshot 0 (`snapshot_group.spans`); cached with the plans."""
        snaps = iter(self)
        for t0, t1 in spans:
            members = [next(snaps) for _ in range(t1 - t0)]
            group = self._groups.get((t0, t1)) if self.cache else None
            if group is None:
                t = time.perf_counter()
                group = block_diagonal(members)
                self.plan_seconds += time.perf_counter() - t
                if self.cache:
                    self._groups[(t0, t1)] = group
            self._use(group.graph.exchange)
            yield t0, t1, group

    def _derive(self, key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rebuild: halo and marginal rows from the edges, send rows agreed with every peer."""
        rows, cols = key // self.num_local, key % self.num_local
        remote = cols >= self.num_inner
        recv = np.zeros(self.num_local - self.num_inner, bool)
        recv[cols[remote] - self.num_inner] = True
        marg = np.zeros(self.num_inner, bool)
        marg[rows[remote]] = True
        send = np.zeros(self.union_send_idx.shape[0], bool)
        p = self.ctx.world_size
        if p > 1:  # ask each owner for the rows we need: positions within its union send list for us
            want = [np.flatnonzero(recv[self.recv_bounds[q]:self.recv_bounds[q + 1]]) for q in range(p)]
            dev = self.ctx.device
            counts = torch.tensor([w.shape[0] for w in want], dtype=torch.int64, device=dev)
            their = torch.empty_like(counts)
            transport.all_to_all(their, counts, group=self.ctx.halo_group, mpi=True)  # a few ints, waited at once
            asked = torch.empty(int(their.sum()), dtype=torch.int64, device=dev)
            transport.all_to_all(asked, torch.from_numpy(np.concatenate(want)).to(dev),
                                 their.tolist(), counts.tolist(), group=self.ctx.halo_group, mpi=True)
            offs = np.repeat(self.send_bounds[:-1], their.cpu().numpy())
            send[asked.cpu().numpy() + offs] = True
        return recv, send, marg

    def _graph(self, t: int, key, w, recv, send, marg) -> SnapshotGraph:
        n_in, n_loc, d = self.num_inner, self.num_local, self.diffs
        perm = np.concatenate([np.flatnonzero(~marg), np.flatnonzero(marg)])
        inv = np.empty(n_in, np.int64)
        inv[perm] = np.arange(n_in)
        halo = np.flatnonzero(recv)
        colmap = np.full(n_loc, -1, np.int64)
        colmap[:n_in] = inv
        colmap[n_in + halo] = n_in + np.arange(halo.shape[0])
        # keys are sorted by union row, so each row's edges are one block: reorder blocks, no sort needed
        counts = np.bincount(key // n_loc, minlength=n_in)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        order = concat_ranges(starts[perm], counts[perm])
        indptr = np.zeros(n_in + 1, np.int64)
        np.cumsum(counts[perm], out=indptr[1:])
        cols = colmap[key % n_loc]
        local = np.concatenate([perm, n_in + halo])
        dev = self.ctx.device
        ex = None
        if self.ctx.world_size > 1:
            sel = np.flatnonzero(send)
            ex = HaloExchange(HaloPlan(torch.from_numpy(inv[self.union_send_idx[sel]]).to(dev),
                                       np.bincount(self.send_peer[sel], minlength=self.ctx.world_size),
                                       np.bincount(self.halo_owner[halo], minlength=self.ctx.world_size)),
                              self.wire.twin(), self.config)
        graph = LocalGraph(
            indptr=indptr, indices=cols[order], edge_weight=w[order], num_inner=n_in,
            num_central=int(n_in - marg.sum()), num_src=int(n_in + halo.shape[0]),
            in_degree=d["in_degree"][t][local].astype(np.int64), in_weight=d["in_weight"][t][local],
            global_ids=self.global_ids[local], exchange=ex, overlap=self.overlap,
            device=dev, part=self.ctx.rank, num_parts=self.ctx.world_size, self_loop=d["self_loop"][t][local])
        return SnapshotGraph(graph, torch.from_numpy(perm).to(dev), torch.from_numpy(inv).to(dev))

    def _use(self, ex: HaloExchange | None) -> None:
        """`ex` is about to exchange: counted in this epoch's traffic, and its steps ended by the loop."""
        if ex is not None:
            self._seen[id(ex)] = ex
            if self.loop_ends_steps:
                ex.loop_ends_steps()

    def exchanges(self, every: bool = False) -> list[HaloExchange]:
        """The exchanges used since the last `take_traffic` (this epoch's, the current step's among them), or
        with `every` all that the plan cache holds too."""
        kept = [g.graph.exchange for g in self._cached + list(self._groups.values())] if every else []
        return list({id(ex): ex for ex in kept + list(self._seen.values()) if ex is not None}.values())

    def take_traffic(self) -> dict:
        """Bytes this rank sent, and all-to-alls it made, in training and in evaluation since the last call."""
        out = {"halo_bytes": 0, "exchanges": 0, "eval_exchanges": 0}
        for g in self._cached + list(self._groups.values()):
            if g.graph.exchange is not None:
                self._seen[id(g.graph.exchange)] = g.graph.exchange
        for ex in self._seen.values():
            for name, rec in ex.epoch_metrics().items():
                if name.endswith("eval"):
                    out["eval_exchanges"] += rec["calls"]
                else:
                    out["halo_bytes"] += sum(rec["bytes"])
                    out["exchanges"] += rec["calls"]
        self._seen = {}
        return out


def own_exchange(sg: SnapshotGraph) -> SnapshotGraph:
    """The same snapshot graph (structure and operators shared) with an exchange of its own."""
    ex = sg.graph.exchange
    if ex is None:
        return sg
    graph = copy.copy(sg.graph)
    plan = HaloPlan(ex.plan.send_idx, ex.plan.send_counts, ex.plan.recv_counts)  # caches of its own, as the stream
    graph.exchange = HaloExchange(plan, ex.wire.twin(), ex.config)
    return SnapshotGraph(graph, sg.perm, sg.inv)
