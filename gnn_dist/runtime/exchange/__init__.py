"""Halo exchange (docs/design.md §4-6): one all_to_all per layer and direction, optionally cheap.

The parts, each owning its state:

    config.py        ExchangeConfig: codec, staleness, skipping, adaptive bit-widths (defaults exact)
    plan.py          HaloPlan: the frozen send indices and counts
    wire.py          Wire: group, transport, side stream; every collective (agreed once, at load)
    step_clock.py    StepClock: the training step, and each call's channel name
    stale.py         StaleBlocks: blocks reused for up to `staleness` steps (PipeGCN)
    skip.py          SkippedRows: rows resent only when they changed (Sancus)
    adaptive.py      AdaptivePolicy: bit-widths solved alike on every rank (AdaQP)
    policy_state.py  the checkpoint envelope around the parts' states
    halo_exchange.py HaloExchange: the thin facade layers and the loop call
"""
from gnn_dist.runtime.exchange.config import ExchangeConfig
from gnn_dist.runtime.exchange.halo_exchange import STATIC, HaloExchange
from gnn_dist.runtime.exchange.plan import HaloPlan
from gnn_dist.runtime.exchange.wire import Wire

__all__ = ["STATIC", "ExchangeConfig", "HaloExchange", "HaloPlan", "Wire"]
