"""Wire: where an exchange's messages travel, and the only place an exchange runs collectives.

It holds the process group, the transport (MPI for small plans under mpiexec, agreed once by whoever
loads the part: `agree`) and, on CUDA, the side stream: encoding, the all_to_all and decoding overlap
whatever the default stream computes meanwhile (the central rows). Where ranks share a GPU the all_to_all
runs on gloo (or MPI) through pinned host copies, made on the side stream too (`gnn_dist.runtime.staging`).
The link model adaptive bit-widths budget with is measured here too (`measure_links`), once, at load.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from gnn_dist.runtime import codec, streams, transport, tuning
from gnn_dist.runtime.transfers import ChannelStats, Pending, add_per_peer


class Wire:
    """One exchange's group, transport and side stream. Building one runs no collective: `agree` does."""

    def __init__(self, group=None, rank: int = 0, device: torch.device = torch.device("cpu"), mpi: bool = False):
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:  # "cuda": the current device, as tensors place it
            device = torch.device("cuda", torch.cuda.current_device())
        self.group, self.rank, self.device, self.mpi = group, rank, device, bool(mpi)
        self.side = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    @classmethod
    def agree(cls, group, rank: int, device: torch.device, rows: int) -> "Wire":
        """Collective: every rank of `group` calls it with its plan's largest all-to-all (`rows`), and all get
        the same transport (`transport.agree_small`)."""
        return cls(group, rank, device, transport.agree_small(group, rows))

    def twin(self) -> "Wire":
        """The same group and transport, with a side stream of its own: for another exchange (snapshots)."""
        return Wire(self.group, self.rank, self.device, self.mpi)

    def with_links(self, config, num_peers: int):
        """`config` with the link model adaptive bit-widths budget with: its own, or measured now (collective,
        on every rank alike) for an adaptive config without one whose plan has peers."""
        if config.codec != "adaptive" or config.links or num_peers <= 1:
            return config
        return dataclasses.replace(config, links=self.measure_links())

    def gather_objects(self, obj) -> list:
        """Collective: every rank's `obj`, in rank order."""
        out = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_splits: list[int], in_splits: list[int]):
        """A blocking all-to-all of raw bytes or rows, on this wire's transport (skipping's row flags)."""
        return transport.all_to_all(out, inp, out_splits, in_splits, group=self.group, mpi=self.mpi)

    def measure_links(self, sizes=tuning.LINK_PROBE_BYTES, reps: int = tuning.LINK_PROBE_REPEATS) -> dict:
        """Collective: time = alpha * bytes + beta per directed link, one permutation round per peer offset.

        beta is the best time of a tiny message and alpha the slope between two
        large ones: large enough that a shaper's burst allowance and scheduling
        jitter do not skew the slope (a two-point fit from 64 KB and 1 MB read
        one 1 Gbit/s lab link as 1.4x slower than the rest, its intercept off
        by milliseconds, and that one link then set every interface's budget).
        """
        world = dist.get_world_size(self.group)
        me = self.rank
        best = {}  # (peer offset, size) -> best seconds; repetitions interleaved so a busy spell hits one sample
        for _ in range(reps):
            for off in range(1, world):
                dst, src = (me + off) % world, (me - off) % world
                for n in sizes:
                    send = torch.zeros(n, dtype=torch.uint8, device=self.device)  # NCCL needs device buffers
                    recv = torch.empty(n, dtype=torch.uint8, device=self.device)
                    splits_in = [n if p == dst else 0 for p in range(world)]
                    splits_out = [n if p == src else 0 for p in range(world)]
                    dist.barrier(group=self.group)
                    t = time.perf_counter()
                    transport.all_to_all(recv, send, splits_out, splits_in, group=self.group, mpi=self.mpi)
                    if send.is_cuda:
                        torch.cuda.synchronize(send.device)
                    best[(off, n)] = min(best.get((off, n), float("inf")), time.perf_counter() - t)
        mine = {}
        for off in range(1, world):
            t = [best[(off, n)] for n in sizes]
            alpha = max((t[2] - t[1]) / (sizes[2] - sizes[1]), 1e-12)
            mine[(me, (me + off) % world)] = (alpha, t[0])
        return {k: v for d in self.gather_objects(mine) for k, v in d.items()}

    def send(self, rows: torch.Tensor, out_rows: int, out_splits: list[int], in_splits: list[int],
             stats: ChannelStats, send_codecs: list[str], recv_codecs: list[str], index: torch.Tensor | None = None,
             distinct: Callable | None = None, observe: Callable | None = None, mpi: bool = True) -> Pending:
        """Send rows[index] (all of `rows` without one) to the peers, each block in its codec; on CUDA on the side
        stream once `rows` are ready there. `distinct()` gives (rows, inverse) of `index` for encoding each row
        once; `observe(peer, width, scale, bits)` sees each quantised block's scales; `mpi=False` keeps this
        send off MPI (a stale block, waited for later)."""
        if self.side is None:
            return self._send_here(rows, out_rows, out_splits, in_splits, stats, send_codecs, recv_codecs, index,
                                   distinct, observe, mpi)
        self.side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.side):
            pending = self._send_here(rows, out_rows, out_splits, in_splits, stats, send_codecs, recv_codecs, index,
                                      distinct, observe, mpi)
        rows.record_stream(self.side)  # made on the caller's stream, read on the side stream
        pending.stream = self.side
        return pending

    def _send_here(self, rows, out_rows, out_splits, in_splits, stats, send_names, recv_names, index, distinct,
                   observe, mpi) -> Pending:
        """Encode per peer, one all_to_all, decode per peer on wait (on the current stream).

        intB codecs read send rows through `index` (no gathered copy); fp32 gathers them once.
        """
        tail = tuple(rows.shape[1:])
        mpi = self.mpi and mpi
        source = rows.flatten(1)
        width, dtype = source.shape[1], source.dtype
        if all(n == "fp32" for n in send_names + recv_names):
            flat = (source[index] if index is not None else source).contiguous()
            out = torch.empty(out_rows, width, dtype=dtype, device=flat.device)
            work = transport.all_to_all(out, flat, out_splits, in_splits, group=self.group, async_op=True, mpi=mpi)
            stats.add([r * width * flat.element_size() for r in in_splits], in_splits, transport.is_mpi(work), out.nbytes)
            return Pending(work, lambda: out.view(out_rows, *tail), stats,
                           accumulate=lambda target, idx: add_per_peer(target, idx, out.view(out_rows, *tail),
                                                                       out_splits))
        nbytes = [codec.wire_bytes(r, width, n) for r, n in zip(in_splits, send_names)]
        send_buf = torch.empty(sum(nbytes), dtype=torch.uint8, device=source.device)
        scales = codec.encode_split(source, index, in_splits, send_names, send_buf, key=streams.dither_key(),
                                    distinct=distinct() if distinct is not None else None)  # the epoch's dither
        for p, (scale, count) in enumerate(zip(scales, in_splits)):
            if scale is not None:
                stats.qvar = stats.qvar + (scale.double() ** 2).sum() * (width / 6.0)
                stats.elements += count * width
                if observe is not None:
                    observe(p, width, scale, int(send_names[p][3:]))
        recv_bytes = [codec.wire_bytes(r, width, n) for r, n in zip(out_splits, recv_names)]
        out = torch.empty(sum(recv_bytes), dtype=torch.uint8, device=source.device)
        work = transport.all_to_all(out, send_buf, recv_bytes, nbytes, group=self.group, async_op=True, mpi=mpi)
        stats.add(nbytes, in_splits, transport.is_mpi(work), out.nbytes)

        def finish() -> torch.Tensor:
            res = torch.empty(out_rows, width, dtype=dtype, device=source.device)
            for p, (chunk, rows) in enumerate(zip(torch.split(out, recv_bytes), torch.split(res, out_splits))):
                if rows.shape[0]:
                    codec.decode_rows(chunk, recv_names[p], width, dtype, out=rows)  # straight into place
            return res.view(out_rows, *tail)

        def accumulate(target: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
            for p, (chunk, idx) in enumerate(zip(torch.split(out, recv_bytes), torch.split(index, out_splits))):
                codec.decode_rows_add(chunk, recv_names[p], width, target, idx)
            return target

        return Pending(work, finish, stats, accumulate=accumulate)
