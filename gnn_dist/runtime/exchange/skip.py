"""Skipped boundary rows (Sancus-style, `--skip-threshold T`): send only the rows that moved.

A forward channel sends a row only when it changed by more than T (relative
L2) since it was last sent, and every `refresh_every` epochs sends them all.
A one-byte flag per halo row tells the receiver which rows come; the rest
keep the values last received. The state is a `SkippedRows`, one per exchange; checkpoints carry its
`state_dict` (`gnn_dist.runtime.exchange.policy_state`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from gnn_dist.runtime.transfers import Pending

if TYPE_CHECKING:
    from gnn_dist.runtime.exchange import HaloExchange


class SkippedRows:
    """One exchange's skipping state: per forward channel, the rows last sent (the reference a row's change
    is measured against) and the halo block last held (rows not sent keep these values)."""

    def __init__(self) -> None:
        self.sent_ref: dict[str, torch.Tensor] = {}
        self.held: dict[str, torch.Tensor] = {}

    def start(self, ex: "HaloExchange", rows: torch.Tensor, channel: str) -> Pending:
        """Send `channel`'s rows that moved by more than the threshold since last sent; all of them periodically."""
        ref = self.sent_ref.get(channel)
        flat = rows.flatten(1)
        if ref is None or ex.epoch % ex.config.refresh_every == 0:
            send = torch.ones(flat.shape[0], dtype=torch.bool, device=flat.device)
        else:
            change = (flat - ref).norm(dim=1) / (ref.norm(dim=1) + 1e-12)
            send = change > ex.config.skip_threshold
        flags = torch.empty(ex.num_halo, dtype=torch.uint8, device=flat.device)
        ex.wire.all_to_all(flags, send.to(torch.uint8), ex.recv_counts, ex.send_counts)
        flags = flags.bool()
        new_ref = flat.clone() if ref is None else ref.clone()
        new_ref[send] = flat[send]
        self.sent_ref[channel] = new_ref
        in_splits = [int(s.sum()) for s in torch.split(send, ex.send_counts)]
        out_splits = [int(f.sum()) for f in torch.split(flags, ex.recv_counts)]
        pending = ex.transfer(rows[send], sum(out_splits), out_splits, in_splits, channel)
        held = self.held.get(channel)

        def merge() -> torch.Tensor:
            got = pending.wait()
            block = got.new_zeros((ex.num_halo,) + tuple(got.shape[1:])) if held is None else held.clone()
            block[flags] = got
            self.held[channel] = block
            return block

        return Pending(None, merge, ex.stats[channel])

    def drain(self) -> None:
        """Nothing to wait for: a step waits for its own rows (the flags' all-to-all blocks, the rows' is waited
        by the layer that started it)."""

    def tensors(self) -> list:
        """What stays between steps (memory reports)."""
        return [self.sent_ref, self.held]

    def state_dict(self) -> dict:
        return {"sent_ref": {k: v.detach().cpu() for k, v in self.sent_ref.items()},
                "held": {k: v.detach().cpu() for k, v in self.held.items()}}

    def load_state_dict(self, state: dict, device) -> None:
        self.sent_ref = {k: v.to(device) for k, v in state["sent_ref"].items()}
        self.held = {k: v.to(device) for k, v in state["held"].items()}
