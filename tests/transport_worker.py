"""Run under mpiexec by tests/test_transport.py: MPI, gloo's own and the duplex all-to-alls deliver the same bytes.

Usage: mpiexec -n P python tests/transport_worker.py OUT
Writes OUT/rank<R>.txt: "ok" if every check held (the bytes; then whether exchange plans agree on
their transport: small ones MPI, any rank's large one gloo everywhere), else the first mismatch.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from gnn_dist.runtime import transport, tuning
from gnn_dist.runtime.exchange import HaloExchange, HaloPlan
from gnn_dist.runtime.launch import init


def exchange(ctx, t: torch.Tensor, splits: list[int], back: list[int], how: str, wait: bool = True):
    """All-to-all of `t` (splits[q] rows to rank q): `how` mpi, duplex (a connection per direction) or gloo's own."""
    out = torch.empty((sum(back),) + tuple(t.shape[1:]), dtype=t.dtype)
    if how == "gloo":
        work = torch.distributed.all_to_all_single(out, t, back, splits, group=ctx.halo_group, async_op=True)
    else:
        work = transport.all_to_all(out, t, back, splits, group=ctx.halo_group, async_op=True, mpi=how == "mpi")
        kind = transport.MPIWork if how == "mpi" else transport.Requests
        assert isinstance(work, kind), f"asked for {how}, got {type(work).__name__}"
    if wait:
        work.wait()
    return out if wait else (out, work)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.uint8) if a.numel() else a, b.view(torch.uint8) if b.numel() else b)


def plans(ctx) -> str:
    """A small plan on every rank goes over MPI; one rank's large plan sends every rank's over gloo."""
    def plan(rows: int) -> HaloExchange:
        counts = [rows // ctx.world_size] * ctx.world_size
        return HaloExchange.connect(HaloPlan(torch.zeros(sum(counts), dtype=torch.int64), counts, counts),
                                    ctx.halo_group, ctx.rank)

    small = plan(8)
    large = plan(tuning.ENV.mpi_max_rows * 2 if ctx.rank == 0 else 8)
    return "ok" if small.over_mpi() and not large.over_mpi() else f"small {small.over_mpi()} large {large.over_mpi()}"


def main() -> None:
    out_dir = Path(sys.argv[1])
    ctx = init()
    p, r = ctx.world_size, ctx.rank
    fits = ctx.local_size <= transport.host_cores()  # the launcher's rule: MPI unless ranks outnumber cores
    msg = "ok" if transport.over_mpi(ctx.halo_group) == fits else f"MPI registered {not fits} with {ctx.local_size} ranks"
    if not fits:  # still compare the two paths
        transport.use_mpi(ctx.halo_group)
    if msg == "ok" and transport.over_duplex(ctx.halo_group):
        msg = "a connection per direction on one host (the launcher's rule: across hosts only)"
    transport.use_duplex(ctx.halo_group, "gloo", None)  # compare it all the same
    gen = torch.Generator().manual_seed(r)
    # uneven splits, an empty block, several dtypes and row shapes, a zero-width tensor
    splits = [(r + q) % 3 for q in range(p)]
    back = [(q + r) % 3 for q in range(p)]
    cases = [torch.randn(sum(splits), 5, generator=gen), torch.randn(sum(splits), 2, 3, generator=gen).to(torch.bfloat16),
             torch.randint(0, 255, (sum(splits), 7), generator=gen, dtype=torch.uint8),
             torch.randint(-9, 9, (sum(splits),), generator=gen, dtype=torch.int64), torch.zeros(sum(splits), 0)]
    # and pairs of a megabyte or more, which take a connection per direction (and empty pairs beside them)
    big_splits, big_back = [s * 40000 for s in splits], [s * 40000 for s in back]
    big = torch.randn(sum(big_splits), 8, generator=gen)
    a, b, c = (exchange(ctx, big, big_splits, big_back, how) for how in ("mpi", "duplex", "gloo"))
    if not (same(a, c) and same(b, c)):
        msg = f"1 MB pairs: MPI {same(a, c)}, duplex {same(b, c)} against gloo's own"
    for i, t in enumerate(cases):
        a, b, c = (exchange(ctx, t, splits, back, how) for how in ("mpi", "duplex", "gloo"))
        if msg == "ok" and not (same(a, c) and same(b, c)):
            msg = f"case {i} ({t.dtype}, {tuple(t.shape)}): MPI {same(a, c)}, duplex {same(b, c)} against gloo's own"
    # two duplex all-to-alls in flight at once (stale blocks), waited in the reverse order
    (first, w1), (second, w2) = (exchange(ctx, t, splits, back, "duplex", wait=False) for t in cases[:2])
    w2.wait(), w1.wait()
    if msg == "ok" and not (same(first, exchange(ctx, cases[0], splits, back, "gloo"))
                            and same(second, exchange(ctx, cases[1], splits, back, "gloo"))):
        msg = "two duplex all-to-alls in flight delivered other bytes than one at a time"
    if msg == "ok":
        msg = plans(ctx)
    (out_dir / f"rank{r}.txt").write_text(msg)
    ctx.close()


if __name__ == "__main__":
    main()
