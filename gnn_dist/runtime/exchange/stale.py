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
The state (queues, block in use, previous received and drift) is a `StaleBlocks`, one per exchange;
checkpoints carry its `state_dict` (`gnn_dist.runtime.exchange.policy_state`).
"""
from __future__ import annotations

import collections

import torch

from gnn_dist.runtime.transfers import Ready

FORMS = ("feed", "correct")
GRADS = ("same", "plain", "fresh")  # backward blocks: as forward's, stale unsmoothed, or waited for


class StaleBlocks:
    """One exchange's stale blocks: per channel, the blocks in flight (queued as started), the block in use,
    and the block last received with its smoothed drift; `through` hands a channel its block (the module)."""

    def __init__(self) -> None:
        self.queues: dict[str, collections.deque] = collections.defaultdict(collections.deque)
        self.used: dict[str, torch.Tensor] = {}
        self.drift: dict[str, tuple] = {}  # channel -> (block last received, smoothed change per step)

    def through(self, cfg, epoch: int, channel: str, pending):
        """What `channel` uses at step `epoch`, given the exchange `pending` just started (see the module)."""
        s = cfg.staleness
        grads = channel.startswith("bwd.")
        if not s or (grads and cfg.stale_grads == "fresh"):
            return pending
        q = self.queues[channel]
        q.append(pending)
        if epoch < cfg.stale_warmup:  # exact warm-up: this step's own block; nothing older is kept
            if _tracks(cfg) and len(q) > 1:  # last step's block, as a stale step would receive it: this step's
                self._observe(cfg, channel, q[0].wait())  # is received first after the warm-up, and observed then
            block = _fresh(q)
            self.used[channel] = block
            return Ready(block)
        received = None
        while len(q) > s:
            received = q.popleft().wait()
        if received is None:  # nothing old enough yet: the oldest block queued, as it is
            block = q[0].wait()
            self.used[channel] = block
            return Ready(block)
        drift = self._observe(cfg, channel, received) if _tracks(cfg) else None
        with torch.no_grad():  # blocks handed out may require grad: no history for the cache
            if cfg.stale_bound and drift is not None and _relative(drift, received) > cfg.stale_bound:
                block = _fresh(q)  # the boundary still moves fast: wait for this step's block
            else:
                plain = grads and cfg.stale_grads == "plain"
                block = received if plain else _blend(cfg, received, self.used.get(channel), drift)
        self.used[channel] = block
        return Ready(block)

    def _observe(self, cfg, channel: str, received: torch.Tensor) -> torch.Tensor | None:
        """Note a newly received block: the smoothed change per step since the previous one (None at first)."""
        prev = self.drift.get(channel)
        drift = None
        if prev is not None and prev[0].shape == received.shape:
            with torch.no_grad():
                change = received - prev[0]
                drift = change if prev[1] is None else torch.lerp(change, prev[1], cfg.momentum)
        self.drift[channel] = (received, drift)
        return drift

    def drain(self) -> None:
        """Wait for every block still in flight: a process group must not close under one."""
        for q in self.queues.values():
            while q:
                q.popleft().wait()

    def tensors(self) -> list:
        """What stays between steps besides the blocks in flight: the blocks in use (memory reports)."""
        return [self.used]

    def state_dict(self) -> dict:
        """The blocks queued (waited for here, as they would be later, and kept decoded), in use and last
        received with their drift: CPU tensors."""
        return {"stale": {ch: [p.wait().detach().cpu() for p in q] for ch, q in self.queues.items()},
                "used": {k: v.detach().cpu() for k, v in self.used.items()},
                "drift": {ch: [None if t is None else t.detach().cpu() for t in pair] for ch, pair in self.drift.items()}}

    def load_state_dict(self, state: dict, device) -> None:
        """Continue from `state_dict`'s (a checkpoint from before the drift was kept holds none)."""
        self.queues = collections.defaultdict(collections.deque, {
            ch: collections.deque(Ready(b.to(device)) for b in blocks) for ch, blocks in state["stale"].items()})
        self.used = {k: v.to(device) for k, v in state["used"].items()}
        self.drift = {ch: tuple(None if t is None else t.to(device) for t in pair)
                      for ch, pair in state.get("drift", {}).items()}


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


def _relative(drift: torch.Tensor, received: torch.Tensor) -> float:
    return float(drift.norm() / received.norm().clamp_min(1e-12))


def _blend(cfg, received: torch.Tensor, used: torch.Tensor | None, drift: torch.Tensor | None) -> torch.Tensor:
    if cfg.stale_form == "correct":
        return received if drift is None else received + drift
    if cfg.momentum and used is not None and used is not received and used.shape == received.shape:
        return torch.lerp(received, used, cfg.momentum)
    return received
