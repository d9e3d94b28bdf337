"""HaloPlan: one rank's send and receive plan, fixed once the part is loaded."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch


@dataclass(frozen=True)
class HaloPlan:
    """Which inner rows go to each peer (`send_idx`, grouped by peer in `send_counts`), and how many halo rows
    arrive from each (`recv_counts`: the halo block is in the owners' send order, so it needs no index)."""

    send_idx: torch.Tensor
    send_counts: tuple[int, ...]
    recv_counts: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "send_counts", tuple(int(n) for n in self.send_counts))
        object.__setattr__(self, "recv_counts", tuple(int(n) for n in self.recv_counts))

    @property
    def num_halo(self) -> int:
        return sum(self.recv_counts)

    @property
    def num_send(self) -> int:
        return int(self.send_idx.shape[0])

    @property
    def num_peers(self) -> int:
        return len(self.send_counts)

    @property
    def device(self) -> torch.device:
        return self.send_idx.device

    @cached_property
    def distinct(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows, inverse) with send_idx == rows[inverse]: each boundary row is encoded once, whatever its peers."""
        return tuple(torch.unique(self.send_idx, return_inverse=True))
