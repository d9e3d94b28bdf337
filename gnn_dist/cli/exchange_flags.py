"""`gnn-dist train`'s exchange flags: how halo rows travel in training, chosen by hand or by `--exchange auto`."""
from __future__ import annotations

import argparse
import sys

from partition.errors import UsageError


def add_exchange_flags(p) -> None:
    """How halo rows travel in training: codecs, adaptive bit-widths, staleness, skipping."""
    p.add_argument("--exchange", default="flags", choices=["flags", "auto"],
                   help="flags (default): the codec, staleness and skipping flags below; auto: the measured setting "
                        "with the best predicted time to accuracy on this partition and these links (prints why; "
                        "docs/exchange.md)")
    p.add_argument("--codec", default="fp32", choices=["fp32", "fp16", "bf16", "int8", "int4", "int2", "adaptive"],
                   help="wire format of halo messages and gradients in training (default fp32: exact); "
                        "adaptive picks 2/4/8 bits per layer, peer and direction")
    p.add_argument("--budget-bits", type=int, default=4, choices=[2, 4, 8],
                   help="adaptive: no interface may take longer than it would at uniform int<B> (default 4)")
    p.add_argument("--adaptive-every", type=int, default=50, help="adaptive: re-solve bit-widths every N epochs")
    p.add_argument("--staleness", type=int, default=0, metavar="S",
                   help="use forward halo blocks from S epochs ago while fresh ones travel; gradients are waited "
                        "for unless --stale-grads says otherwise (default 0: exact)")
    p.add_argument("--stale-momentum", type=float, default=None, metavar="M",
                   help="with --staleness: used block = M * previous + (1 - M) * received (PipeGCN-GF smoothing; "
                        "default 0.8; 0: none, which with --stale-grads plain is PipeGCN as published)")
    p.add_argument("--stale-form", default="feed", choices=["feed", "correct"],
                   help="with --staleness: feed the smoothed block forward (PipeGCN-GF), or correct the received "
                        "block by its smoothed drift per epoch (docs/exchange.md)")
    p.add_argument("--stale-warmup", type=int, default=0, metavar="W",
                   help="with --staleness: the first W epochs wait for fresh blocks (exact)")
    p.add_argument("--stale-bound", type=float, default=0.0, metavar="B",
                   help="with --staleness: an epoch whose smoothed relative drift exceeds B waits for its fresh "
                        "block (0: never)")
    p.add_argument("--stale-grads", default="fresh", choices=["fresh", "plain", "same"],
                   help="with --staleness: backward gradients are waited for (fresh, default), go stale unsmoothed "
                        "(plain), or follow the forward rows' policy (same: PipeGCN)")
    p.add_argument("--skip-threshold", type=float, default=0.0,
                   help="resend a halo row only when its relative change exceeds this (default 0: always)")
    p.add_argument("--refresh-every", type=int, default=10, help="with --skip-threshold: full resend every N epochs")


def stale_flags(a: argparse.Namespace) -> list[str]:
    """The --stale-* flags given other than at their defaults (--exchange auto refuses them: it would drop them)."""
    defaults = {"stale_momentum": None, "stale_form": "feed", "stale_warmup": 0, "stale_bound": 0.0,
                "stale_grads": "fresh"}
    return [k for k, v in defaults.items() if getattr(a, k) != v]


def say_single_rank(a: argparse.Namespace, ctx) -> None:
    """One line where exchange flags were given to a one-rank run: with no peer there is no halo to send, so
    they act on nothing (the README promises every flag honoured or refused in one line)."""
    given = [f for f, on in (("--codec " + a.codec, a.codec != "fp32"), (f"--staleness {a.staleness}", a.staleness),
                             (f"--skip-threshold {a.skip_threshold:g}", a.skip_threshold),
                             ("--exchange auto", a.exchange == "auto")) if on]
    if given and ctx.world_size == 1 and ctx.is_main:
        sys.stderr.write(f"[gnn-dist] {', '.join(given)} act{'s' * (len(given) == 1)} on nothing at one rank: "
                         f"no halo is exchanged (launch with mpiexec -n P on a partition of P parts)\n")


def exchange_config(a: argparse.Namespace):
    from gnn_dist.runtime.exchange import ExchangeConfig

    smoothing = {} if a.stale_momentum is None else {"momentum": a.stale_momentum}
    return ExchangeConfig(codec=a.codec, staleness=a.staleness, skip_threshold=a.skip_threshold,
                          refresh_every=a.refresh_every, adaptive_every=a.adaptive_every,
                          budget_bits=a.budget_bits, input_cache=not a.no_input_cache, stale_form=a.stale_form,
                          stale_warmup=a.stale_warmup, stale_bound=a.stale_bound, stale_grads=a.stale_grads,
                          **smoothing).validate()


def auto_exchange(args: argparse.Namespace, ctx, graph, width: int) -> None:
    """--exchange auto: switch to the setting of best predicted time to accuracy; rank 0 says which and why."""
    from gnn_dist.train import advice

    if graph.types is not None:  # every rank holds the same kind of graph: all refuse alike
        raise UsageError("--exchange auto applies to graphs without node and edge types (choose --codec yourself)")
    if graph.exchange is None:  # one part (or none with halo rows): nothing travels
        if ctx.is_main:
            sys.stderr.write("[gnn-dist] --exchange auto: exact (no part has halo rows: nothing to exchange)\n")
        return
    widths = advice.layer_widths(graph.num_features, args.hidden, width, args.layers)
    cand, why, links = advice.choose(graph.exchange, graph, widths, ctx)
    advice.apply(graph.exchange, cand, links)
    if ctx.is_main:
        sys.stderr.write(f"[gnn-dist] {why}\n")
