"""ExchangeConfig: how training messages travel (codec, staleness, skipping, adaptive bit-widths)."""
from __future__ import annotations

from dataclasses import dataclass

from gnn_dist.runtime import codec
from gnn_dist.runtime.exchange import stale
from partition.errors import UsageError


@dataclass
class ExchangeConfig:
    """How training messages travel; the defaults are exact."""

    codec: str = "fp32"  # fp32 | fp16 | bf16 | int8 | int4 | int2 | adaptive
    staleness: int = 0  # use blocks from up to this many epochs ago (0: fresh)
    # stale blocks (gnn_dist.runtime.exchange.stale): the smoothing's M, its form (feed: used = M x previous used +
    # (1 - M) x received, PipeGCN-GF; correct: received + smoothed drift), exact warm-up steps, and the change
    # test's bound on the relative drift (0: none)
    momentum: float = 0.8
    stale_form: str = "feed"
    stale_warmup: int = 0
    stale_bound: float = 0.0
    # backward blocks: fresh (waited for; measured: stale gradients never reached exact's accuracy on SBM-50k),
    # plain stale, or the same policy as forward (PipeGCN)
    stale_grads: str = "fresh"
    skip_threshold: float = 0.0  # resend a row only if its relative change exceeds this
    refresh_every: int = 10  # with skipping: send every row at least this often (epochs)
    adaptive_every: int = 50  # adaptive: re-solve bit-widths every N epochs
    budget_bits: int = 4  # adaptive: each link may spend the wire time of uniform int<budget_bits>
    input_cache: bool = True  # fetch the input features' halo once; exact (see input_dropout)
    # adaptive: a pinned link model {(src, dst): (seconds per byte, seconds per message)}; None: measured where the
    # part is loaded (`HaloExchange.connect`, `Wire.measure_links`)
    links: dict | None = None

    @property
    def reuses_rows(self) -> bool:
        """Whether a step may use rows sent in an earlier step (stale blocks or skipped rows)."""
        return self.staleness > 0 or self.skip_threshold > 0

    def validate(self) -> "ExchangeConfig":
        if self.codec not in codec.CODECS + ("adaptive",):
            raise UsageError(f"unknown codec '{self.codec}' (choose from {', '.join(codec.CODECS + ('adaptive',))})")
        if self.staleness < 0 or not 0 <= self.momentum < 1 or not self.skip_threshold >= 0 or self.refresh_every < 1:
            raise UsageError("staleness >= 0, 0 <= momentum < 1, skip_threshold >= 0, refresh_every >= 1 required")
        if (self.stale_form not in stale.FORMS or self.stale_grads not in stale.GRADS or self.stale_warmup < 0
                or not self.stale_bound >= 0):  # not >=: NaN fails too
            raise UsageError(f"stale form one of {', '.join(stale.FORMS)}, stale grads one of {', '.join(stale.GRADS)}, "
                             f"stale warm-up >= 0, stale bound >= 0 required")
        if self.staleness and self.skip_threshold:
            raise UsageError("staleness and skip_threshold cannot be combined (choose one cache policy)")
        if self.budget_bits not in codec.INT_BITS:
            raise UsageError(f"budget_bits must be one of {codec.INT_BITS}")
        return self
