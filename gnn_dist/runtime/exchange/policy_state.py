"""What a checkpoint keeps of one rank's HaloExchange, so a resumed run goes on exactly as the uninterrupted one.

Everything in it changes results:
- the step counter, and whether the next training call begins a step: skipping
  refreshes every `refresh_every` steps, and the adaptive policy solves at set steps;
- stale blocks (`staleness`): the blocks still queued, waited for here (they
  would be later) and kept decoded, the smoothed block in use, and the block
  last received with the smoothed drift (`gnn_dist.runtime.exchange.stale`);
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

from typing import TYPE_CHECKING

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


def save(ex: "HaloExchange") -> dict:
    """This rank's policy state of exchange `ex`: the envelope (plan, settings) around each part's own state
    (the step clock's, the stale blocks', skipping's, the adaptive policy's), in one flat dict as before."""
    state = {"plan": [list(ex.send_counts), list(ex.recv_counts)], "settings": settings(ex), **ex.clock.state_dict(),
             **ex.stale.state_dict(), **ex.skip.state_dict()}
    if ex.policy is not None:
        state["adaptive"] = ex.policy.state_dict()
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
    ex.clock.load_state_dict(state)
    ex.stale.load_state_dict(state, ex.device)
    ex.skip.load_state_dict(state, ex.device)
    if ex.policy is not None and "adaptive" in state:
        ex.policy.load_state_dict(state["adaptive"], ex.device)
