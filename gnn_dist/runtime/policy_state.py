"""What a checkpoint keeps of one rank's HaloExchange, so a resumed run goes on exactly as the uninterrupted one.

Everything in it changes results:
- the step counter, and whether the next training call begins a step: skipping
  refreshes every `refresh_every` steps, and the adaptive policy solves at set steps;
- stale blocks (`staleness`): the blocks still queued, waited for here (they
  would be later) and kept decoded, the smoothed block in use, and the block
  last received with the smoothed drift (`gnn_dist.runtime.stale`);
- skipping's references: the rows last sent, and the halo block last held;
- the adaptive policy: its bit table, the statistics of the next solve, when
  it last solved, and the link model it budgets with (measured at start-up,
  so a resumed run would otherwise budget with other numbers).
The dither needs nothing here: each encode's key is a function of (seed,
epoch, rank) and the encodes before it in the epoch (`gnn_dist.runtime.streams`).

A state holds tensors (on the CPU) and plain values only: checkpoints are read
with `torch.load(weights_only=True)`. It belongs to one rank's plan and one set
of policy settings; `mismatch` says when it cannot continue an exchange.
"""
from __future__ import annotations

import collections
from typing import TYPE_CHECKING

import torch

from gnn_dist.runtime.transfers import Ready

if TYPE_CHECKING:
    from gnn_dist.runtime.exchange import HaloExchange


def settings(ex: "HaloExchange") -> list:
    """The policy settings a state was made under. The stale blocks' own settings only with staleness, where
    they change anything: a checkpoint written before they existed still continues every other setting."""
    c = ex.config
    stale = [c.stale_form, c.stale_warmup, c.stale_bound, c.stale_grads] if c.staleness else []
    # reused rows' blocks and references hold ReLU(h) rows since issue 30 (gnn_dist.nn.boundary), dropped
    # rows before it: an older state would feed those into another step's dropout, so it starts afresh
    keyed = ["rows before dropout"] if c.reuses_rows else []
    return [c.codec, c.staleness, c.momentum, c.skip_threshold, c.refresh_every, c.adaptive_every, c.budget_bits,
            *stale, *keyed]


def _compared(values: list | None) -> list | None:
    """Settings as compared: the smoothing M only with staleness (its default moved from 0.95 to 0.8, and a
    checkpoint without staleness, which M does not touch, still continues)."""
    if not isinstance(values, list) or len(values) < 3 or values[1]:
        return values
    return values[:2] + values[3:]


def _cpu(blocks: dict) -> dict:
    return {k: v.detach().cpu() for k, v in blocks.items()}


def save(ex: "HaloExchange") -> dict:
    """This rank's policy state of exchange `ex` (stale blocks in flight are waited for)."""
    state = {"plan": [list(ex.send_counts), list(ex.recv_counts)], "settings": settings(ex), **ex.clock.state_dict(),
             "stale": {ch: [p.wait().detach().cpu() for p in q] for ch, q in ex._queues.items()},
             "used": _cpu(ex._used), "sent_ref": _cpu(ex._sent_ref), "held": _cpu(ex._held),
             "drift": {ch: [None if t is None else t.detach().cpu() for t in pair] for ch, pair in ex._drift.items()}}
    if ex.policy is not None:
        p = ex.policy
        state["adaptive"] = {"table": dict(p.table), "solved_at": int(p.solved_at),
                             "links": {k: (float(a), float(b)) for k, (a, b) in p.links.items()},
                             "local": {k: (torch.as_tensor(r).detach().double().cpu(), int(rows), int(width))
                                       for k, (r, rows, width) in p.local.items()}}
    return state


def mismatch(ex: "HaloExchange", state: dict) -> str | None:
    """Why `state` cannot continue exchange `ex`: another partition or other policy settings; None if it can."""
    if state.get("plan") != [list(ex.send_counts), list(ex.recv_counts)]:
        return "the partition's halo plan differs from the checkpoint's"
    now = settings(ex)
    if ex.config.reuses_rows and _compared(state.get("settings")) == _compared(now[:-1]):
        return ("the checkpoint was written by an older version, whose stale blocks and skip references hold rows "
                "sent after dropout")
    if _compared(state.get("settings")) != _compared(now):
        return "the exchange settings (codec, staleness, skipping, adaptive) differ from the checkpoint's"
    return None


def load(ex: "HaloExchange", state: dict) -> None:
    """Continue exchange `ex` from `state` (check `mismatch` first)."""
    dev = ex.device
    ex.clock.load_state_dict(state)
    ex._queues = collections.defaultdict(collections.deque, {
        ch: collections.deque(Ready(b.to(dev)) for b in blocks) for ch, blocks in state["stale"].items()})
    ex._used, ex._sent_ref, ex._held = ({k: v.to(dev) for k, v in state[name].items()}
                                        for name in ("used", "sent_ref", "held"))
    ex._drift = {ch: tuple(None if t is None else t.to(dev) for t in pair) for ch, pair in state.get("drift", {}).items()}
    if ex.policy is not None and "adaptive" in state:
        a, p = state["adaptive"], ex.policy
        p.table, p.solved_at, p.links = dict(a["table"]), a["solved_at"], dict(a["links"])
        p.local = {k: (r.to(dev), rows, width) for k, (r, rows, width) in a["local"].items()}
