"""HaloPlan: one rank's send and receive plan, fixed once the part is loaded."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from partition.errors import UsageError


@dataclass(frozen=True, eq=False)
class HaloPlan:
    """Which inner rows go to each peer (`send_idx`, grouped by peer in `send_counts`), and how many halo rows
    arrive from each (`recv_counts`: the halo block is in the owners' send order, so it needs no index)."""

    send_idx: torch.Tensor
    send_counts: tuple[int, ...]
    recv_counts: tuple[int, ...]

    def __post_init__(self):
        if not isinstance(self.send_idx, torch.Tensor) or self.send_idx.dim() != 1:
            raise UsageError("a halo plan's send_idx is a 1-D tensor of inner row ids")
        counts = [[int(n) for n in c] for c in (self.send_counts, self.recv_counts)]
        if any(n < 0 or n != c for raw, ints in zip((self.send_counts, self.recv_counts), counts)
               for c, n in zip(raw, ints)):
            raise UsageError("a halo plan's send and receive counts are whole numbers >= 0")
        if len(counts[0]) != len(counts[1]) or sum(counts[0]) != self.send_idx.shape[0]:
            raise UsageError(f"a halo plan needs one send and one receive count per peer, the send counts summing "
                             f"to len(send_idx): {len(counts[0])} and {len(counts[1])} counts, "
                             f"{sum(counts[0])} against {self.send_idx.shape[0]} rows")
        object.__setattr__(self, "send_counts", tuple(counts[0]))
        object.__setattr__(self, "recv_counts", tuple(counts[1]))

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

    def tensors(self) -> list:
        """What the plan keeps (memory reports): its send rows, and their distinct rows once computed."""
        return [self.send_idx, self.__dict__.get("distinct")]

    @cached_property
    def distinct(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows, inverse) with send_idx == rows[inverse]: each boundary row is encoded once, whatever its peers."""
        return tuple(torch.unique(self.send_idx, return_inverse=True))
