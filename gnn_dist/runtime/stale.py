"""Stale halo blocks (PipeGCN, `--staleness S`): which block a channel hands out while the fresh one travels.

A channel's blocks queue up as they are started; the block used at step t
is built from the block started S steps earlier (the received block) in one
of two forms (`ExchangeConfig.stale_form`), with M = `momentum`:
- feed (PipeGCN-GF): used = M x last used + (1 - M) x received. The smoothed
  value is fed forward; it averages out dropout's noise but lags the true
  boundary by about 1 / (1 - M) steps.
- correct: used = received + drift, drift = M x drift + (1 - M) x (received -
  previous received): the received block, moved on by the smoothed change per
  step. Only the correction is smoothed, so it does not lag the boundary; it
  predicts where the boundary went while the block travelled.
Two bounds keep early training, where the boundary moves most, exact:
- `stale_warmup` W: the first W steps wait for their own fresh block;
- `stale_bound` B (Sancus-style change test): a step whose smoothed relative
  drift ||drift|| / ||received|| exceeds B waits for its fresh block too.
Until a block is S steps old, the oldest one queued is used as it is.
Gradients (`stale_grads`) follow the forward rows' policy (same), or go stale
unsmoothed (plain), or are waited for (fresh: only the forward rows are stale).

Received blocks are never written: a block handed out may be an autograd
output (HaloWait) or saved for backward, so each form builds a new tensor.
The state (queues, block in use, previous received and drift) lives on the
exchange, so checkpoints carry it (`gnn_dist.runtime.policy_state`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from gnn_dist.runtime.transfers import Ready

if TYPE_CHECKING:
    from gnn_dist.runtime.exchange import HaloExchange

FORMS = ("feed", "correct")
GRADS = ("same", "plain", "fresh")  # backward blocks: as forward's, stale unsmoothed, or waited for


def through_cache(ex: "HaloExchange", channel: str, pending):
    """What `channel` uses this step, given the exchange `pending` just started (see the module)."""
    cfg = ex.config
    s = cfg.staleness
    grads = channel.startswith("bwd.")
    if not s or (grads and cfg.stale_grads == "fresh"):
        return pending
    q = ex._queues[channel]
    q.append(pending)
    if ex.epoch < cfg.stale_warmup:  # exact warm-up: this step's own block; nothing older is kept
        if _tracks(cfg) and len(q) > 1:  # last step's block, as a stale step would receive it: this step's
            _observe(ex, channel, q[0].wait())  # is received first after the warm-up, and observed then
        block = _fresh(q)
        ex._used[channel] = block
        return Ready(block)
    received = None
    while len(q) > s:
        received = q.popleft().wait()
    if received is None:  # nothing old enough yet: the oldest block queued, as it is
        block = q[0].wait()
        ex._used[channel] = block
        return Ready(block)
    drift = _observe(ex, channel, received) if _tracks(cfg) else None
    with torch.no_grad():  # blocks handed out may require grad: no history for the cache
        if cfg.stale_bound and drift is not None and _relative(drift, received) > cfg.stale_bound:
            block = _fresh(q)  # the boundary still moves fast: wait for this step's block
        else:
            plain = grads and cfg.stale_grads == "plain"
            block = received if plain else _blend(cfg, received, ex._used.get(channel), drift)
    ex._used[channel] = block
    return Ready(block)


def _fresh(q) -> torch.Tensor:
    """Wait for every queued block; keep only this step's (the last), which the next step receives."""
    while len(q) > 1:
        q.popleft().wait()
    block = q[0].wait()
    q[0] = Ready(block)
    return block


def _tracks(cfg) -> bool:
    """Whether the drift is needed (the correct form, or the change test)."""
    return cfg.stale_form == "correct" or cfg.stale_bound > 0


def _observe(ex: "HaloExchange", channel: str, received: torch.Tensor) -> torch.Tensor | None:
    """Note a newly received block: the smoothed change per step since the previous one (None at first)."""
    prev = ex._drift.get(channel)
    m = ex.config.momentum
    drift = None
    if prev is not None and prev[0].shape == received.shape:
        with torch.no_grad():
            change = received - prev[0]
            drift = change if prev[1] is None else torch.lerp(change, prev[1], m)
    ex._drift[channel] = (received, drift)
    return drift


def _relative(drift: torch.Tensor, received: torch.Tensor) -> float:
    return float(drift.norm() / received.norm().clamp_min(1e-12))


def _blend(cfg, received: torch.Tensor, used: torch.Tensor | None, drift: torch.Tensor | None) -> torch.Tensor:
    if cfg.stale_form == "correct":
        return received if drift is None else received + drift
    if cfg.momentum and used is not None and used is not received and used.shape == received.shape:
        return torch.lerp(received, used, cfg.momentum)
    return received
