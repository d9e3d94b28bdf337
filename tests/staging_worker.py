"""Run under mpiexec by tests/test_staging.py: collectives staged through host buffers equal direct ones.

Usage: mpiexec -n P python tests/staging_worker.py OUT
Writes OUT/rank<R>.txt: "ok" if every case gave the same bits staged (CPU tensors through separate host
buffers, as a GPU's go through pinned ones) and direct, and staging really ran for the staged ones;
else the first case that differed.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from gnn_dist.nn.norm import BatchNorm
from gnn_dist.runtime import staging, transport
from gnn_dist.runtime.collectives import all_sum, broadcast
from gnn_dist.runtime.exchange import ExchangeConfig, HaloExchange, HaloPlan, Wire
from gnn_dist.runtime.halo_fetch import HaloWait
from gnn_dist.runtime.launch import init

INNER = 40


def plan(ctx) -> tuple[torch.Tensor, list[int], list[int]]:
    """Uneven blocks, an empty one among them: rank r sends (r + 2q) % 5 rows to q, rows repeating across peers."""
    p, r = ctx.world_size, ctx.rank
    send = [(r + 2 * q) % 5 for q in range(p)]
    recv = [(q + 2 * r) % 5 for q in range(p)]
    gen = torch.Generator().manual_seed(100 + r)
    return torch.randint(0, INNER, (sum(send),), generator=gen), send, recv


def steps(ctx, cfg: ExchangeConfig, width: int, dtype: torch.dtype, mpi: bool, count: int) -> list[torch.Tensor]:
    """`count` training steps of one layer's exchange (forward halo, gradients home), then an evaluation one."""
    torch.manual_seed(7)  # the codecs' dither keys
    idx, send, recv = plan(ctx)
    ex = HaloExchange(HaloPlan(idx, send, recv), Wire(ctx.halo_group, ctx.rank, idx.device, mpi), cfg)
    gen = torch.Generator().manual_seed(ctx.rank)
    out = []
    for _ in range(count):
        x = torch.randn(INNER, width, generator=gen).to(dtype).requires_grad_()
        channel = ex.channel("layer", training=True)
        pending = ex.start(x, channel)
        busy = x.detach().float().sum()  # local work while the block travels: waited for afterwards
        halo = HaloWait.apply(x, pending, ex, channel)
        (halo.float() * torch.arange(1, halo.shape[0] + 1).view(-1, *[1] * (halo.dim() - 1))).sum().backward()
        out += [halo.detach(), x.grad, busy]
    out.append(ex.start(x.detach(), None).wait())
    ex.drain()
    return out


def cases():
    for name in ("fp32", "fp16", "bf16", "int8", "int4", "int2"):
        for width in (5, 37):
            yield f"{name} width {width}", ExchangeConfig(codec=name), width, torch.float32, 1
    yield "float64 rows", ExchangeConfig(codec="int8"), 6, torch.float64, 1
    yield "bfloat16 rows", ExchangeConfig(), 6, torch.bfloat16, 1
    yield "stale int4 blocks", ExchangeConfig(codec="int4", staleness=1, momentum=0.0), 9, torch.float32, 3
    yield "skipped rows", ExchangeConfig(skip_threshold=0.5, refresh_every=2), 7, torch.float32, 3


def collectives(ctx) -> list[torch.Tensor]:
    """Sums and broadcasts of several dtypes, and BatchNorm's global statistics and their gradients."""
    gen = torch.Generator().manual_seed(ctx.rank)
    out = [all_sum(torch.randn(9, generator=gen, dtype=torch.float64), ctx),
           all_sum(torch.randint(-50, 50, (4, 3), generator=gen), ctx),
           all_sum(torch.randn(6, generator=gen).to(torch.bfloat16), ctx)]
    out.append(broadcast(torch.randn(4, 3, generator=gen), ctx))
    torch.manual_seed(0)
    bn = BatchNorm(5)
    x = torch.randn(11 + ctx.rank, 5, generator=gen, requires_grad=True)
    bn(x).pow(2).sum().backward()
    return out + [x.grad, bn.running_mean, bn.running_var]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    def bits(t: torch.Tensor) -> torch.Tensor:
        return t.contiguous().view(-1).view(torch.uint8)

    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and torch.equal(bits(x), bits(y))
                                    for x, y in zip(a, b))


def check(label: str, run) -> str:
    """run() direct, then staged: the same bits, and host copies made only when staged."""
    staging.enable(None)
    calls = staging.COUNTS["calls"]
    direct = run()
    if staging.COUNTS["calls"] != calls:
        return f"{label}: the direct run went through staging"
    staging.enable(torch.device("cpu"))
    got = run()
    staging.enable(None)
    if staging.COUNTS["calls"] == calls:
        return f"{label}: the staged run made no host copy"
    return "ok" if same(direct, got) else f"{label}: staged and direct results differ"


def main() -> None:
    out_dir = Path(sys.argv[1])
    ctx = init(backend="gloo")
    if not transport.over_mpi(ctx.halo_group):  # ranks outnumber cores here: still test MPI's path
        transport.use_mpi(ctx.halo_group)
    msg = check("sums, broadcasts, BatchNorm", lambda: collectives(ctx))
    for label, cfg, width, dtype, count in cases():
        for mpi in (False, True):
            if msg == "ok":
                msg = check(f"{label}, {'MPI' if mpi else 'gloo'}", lambda: steps(ctx, cfg, width, dtype, mpi, count))
    (out_dir / f"rank{ctx.rank}.txt").write_text(msg)
    ctx.close()


if __name__ == "__main__":
    main()
