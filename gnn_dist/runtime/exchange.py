"""Halo exchange (docs/design.md §4-6): one all_to_all per layer and direction, optionally cheap.

Forward sends `x[send_idx]` to the parts that hold those rows as halo; the
receive buffer *is* the halo block because the partitioner ordered halo rows
in the owner's send order. Backward is the mirror: halo-row gradients go back
to their owners and are summed in at `send_idx`.

Each (direction, layer) is a channel. Per channel and peer, messages may be
encoded (`codec`, or `adaptive` bit-widths from `gnn_dist.runtime.adaptive`), reused
from up to `staleness` epochs ago while the fresh block travels in the
background (PipeGCN), or sent only for rows that changed by more than
`skip_threshold` (Sancus). Channels are named by the module that exchanges
(`channel`); evaluation gets no channel and always sends fp32, fresh.

The input features never change, so with `input_cache` their halo crosses
the wire once (`static_halo`); the model drops it locally with masks keyed by
node id (`gnn_dist.nn.dropout.input_dropout`) and `provide`s it, and the
first layer's forward then sends nothing. Exact: the same values arrive as
if sent. A halo fetched once for several layers (HeteroConv's relations,
`gnn_dist.nn.boundary`) is `provide`d the same way, as a tensor: a layer
fetching it (`gnn_dist.runtime.halo_fetch`) finds it `held`.

On CUDA the whole exchange (gather of send rows aside) runs on a side stream: encoding, the NCCL
all_to_all and decoding overlap whatever the default stream computes meanwhile (the central rows). Where
ranks share a GPU the all_to_all runs on gloo (or MPI) through pinned host copies, made on the side stream
too (`gnn_dist.runtime.staging`). Statistics stay on the device until the epoch's metrics are read.
"""
from __future__ import annotations

import collections
import weakref
from dataclasses import dataclass

import torch

from gnn_dist.runtime import codec, policy_state, skip, stale, streams, transport
from gnn_dist.runtime.adaptive import AdaptivePolicy
from gnn_dist.runtime.step_clock import StepClock
from gnn_dist.runtime.transfers import ChannelStats, Pending, Ready, add_per_peer
from partition.errors import UsageError

STATIC = "fwd.input"  # metrics channel of the one-off fetch of the input features' halo


@dataclass
class ExchangeConfig:
    """How training messages travel; the defaults are exact."""

    codec: str = "fp32"  # fp32 | fp16 | bf16 | int8 | int4 | int2 | adaptive
    staleness: int = 0  # use blocks from up to this many epochs ago (0: fresh)
    # stale blocks (gnn_dist.runtime.stale): the smoothing's M, its form (feed: used = M x previous used +
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
    # adaptive: a pinned link model {(src, dst): (seconds per byte, seconds per message)}; None: measured at start
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


class HaloExchange:
    """Send/receive plan of one rank plus the per-channel state of the cheap-exchange policies."""

    def __init__(self, send_idx: torch.Tensor, send_counts: list[int], recv_counts: list[int], group=None,
                 config: ExchangeConfig | None = None, rank: int = 0, mpi: bool | None = None):
        self.send_idx, self.send_counts, self.recv_counts = send_idx, list(send_counts), list(recv_counts)
        self.group, self.rank = group, rank
        self.config = (config or ExchangeConfig()).validate()
        self.stats: dict[str, ChannelStats] = collections.defaultdict(ChannelStats)
        self.clock = StepClock()  # the training step, and each training call's channel name
        self.stale = stale.StaleBlocks()  # each policy's state, owned by its part
        self.skip = skip.SkippedRows()
        self._fresh: set[str] = set()  # channels of owners with reuse_rows = False: never stale or skipped
        self._static: tuple | None = None  # (input features, their halo rows), fetched once
        self._distinct: tuple | None = None  # (send_idx, its distinct rows, inverse)
        self._given: dict[int, tuple] = {}  # id(x) -> (weak ref to x, its halo or a function giving it): `provide`
        self.device = send_idx.device
        # transport: given (the same on every rank), or agreed now with the peers, who build theirs now too
        self._mpi = mpi if mpi is not None else transport.agree_small(group, max(self.num_halo, int(send_idx.shape[0])))
        self._side = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self.policy = AdaptivePolicy(self, self.config) if self.config.codec == "adaptive" else None
        self.auto_links: dict | None = None  # links measured by `--exchange auto` (`reconfigure`), kept for resume

    def reconfigure(self, config: ExchangeConfig, auto_links: dict | None = None) -> None:
        """Switch to other settings before the first training exchange (`--exchange auto`'s choice, or the one a
        checkpoint was made under); `auto_links`: the links it measured, which an adaptive config then uses."""
        if self.clock.owners or self.clock.epoch:  # (a loaded state has begun too)
            raise RuntimeError("an exchange is reconfigured only before its first training exchange")
        self.config = config.validate()
        self.policy = AdaptivePolicy(self, self.config) if self.config.codec == "adaptive" else None
        self.auto_links = auto_links

    # ------------------------------------------------------------- plan sizes
    def over_mpi(self) -> bool:
        """Whether this plan's all-to-alls travel over MPI (`transport`: small plans under mpiexec)."""
        return self._mpi

    @property
    def num_halo(self) -> int:
        return sum(self.recv_counts)

    @property
    def num_peers(self) -> int:
        return len(self.send_counts)

    def _distinct_send_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows, inverse) with send_idx == rows[inverse]: each boundary row is encoded once, whatever its peers."""
        if self._distinct is None or self._distinct[0] is not self.send_idx:  # a new plan (snapshots) resets it
            self._distinct = (self.send_idx, *torch.unique(self.send_idx, return_inverse=True))
        return self._distinct[1:]

    def bits_for(self, channel: str, src: int, dst: int) -> str:
        """Codec name of the block `src` sends to `dst` on `channel` (same answer on every rank)."""
        if self.policy is not None:
            return self.policy.codec_for(channel, src, dst)
        return self.config.codec

    # ---------------------------------------------------------------- epochs
    def channel(self, owner: object, training: bool) -> str | None:
        """Name the channel of one exchange by `owner` (the module that exchanges); None when not training.

        Evaluation (no autograd, or a module in eval mode) gets None: exact fp32, fresh, and no
        staleness, skip, adaptive or step state is touched, so it may run between any two steps.
        A training call gets "L<i>", i the owner's order of first training use (the same on every
        rank, as every rank runs the same model), or "L<i>.<k>" for the owner's k-th call within
        one step; an owner with a `channel_label` attribute (e.g. "L0.author:writes:paper", set by
        the typed models) is named by it instead; an owner whose `reuse_rows` is False (`gnn_dist.nn.boundary`)
        has its channels sent fresh and whole under any staleness or skipping. Steps end at `end_step`, or
        where `gnn_dist.runtime.step_clock` guesses they do for a loop that never calls it.
        """
        if not training:
            return None
        step = self.clock.epoch
        name = self.clock.name(owner)
        if self.clock.epoch != step and self.policy is not None:
            self.policy.maybe_solve(self.clock.epoch)
        if getattr(owner, "reuse_rows", True) is False:
            self._fresh.add(name)
        return name

    @property
    def epoch(self) -> int:
        """Training steps begun before the current one (`gnn_dist.runtime.step_clock`)."""
        return self.clock.epoch

    def loop_ends_steps(self) -> None:
        """Declare that the caller ends every training step with `end_step` (before the first), so that no step
        boundary is ever guessed: SGC's hops over its inputs are then one step, not one each."""
        self.clock.explicit = True

    def end_step(self) -> None:
        """The training step is over (call it after the optimiser step): the next training exchange begins the
        next one, and no step boundary is guessed from now on (`gnn_dist.runtime.step_clock`)."""
        self.clock.end_step()

    def drain(self) -> None:
        """Wait for every background (stale) exchange still in flight: a process group must not close under one."""
        self.stale.drain()

    def epoch_metrics(self) -> dict:
        out = {}
        for name in sorted(self.stats):
            rec = self.stats[name].reset()
            if not rec["calls"]:  # e.g. the one-off input fetch, after its epoch
                continue
            train = not name.endswith("eval") and name != STATIC
            rec["staleness"] = self.config.staleness if train else 0
            if self.policy is not None and train:
                rec["bits"] = [int(self.bits_for(name, self.rank, p)[3:]) if p != self.rank else 0
                               for p in range(self.num_peers)]
            out[name] = rec
        return out

    # ------------------------------------------------------------- the wire
    def _a2a(self, rows: torch.Tensor, out_rows: int, out_splits: list[int], in_splits: list[int],
             channel: str | None, direction: str, index: torch.Tensor | None = None, label: str = "") -> Pending:
        """Send rows[index] (all of `rows` without one); on CUDA on the side stream once `rows` are ready there.

        No `channel`: exact fp32, counted under `label` (default: the direction's eval channel).
        """
        if self._side is None:
            return self._a2a_here(rows, out_rows, out_splits, in_splits, channel, direction, index, label)
        self._side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._side):
            pending = self._a2a_here(rows, out_rows, out_splits, in_splits, channel, direction, index, label)
        rows.record_stream(self._side)  # made on the caller's stream, read on the side stream
        pending.stream = self._side
        return pending

    def _a2a_here(self, rows: torch.Tensor, out_rows: int, out_splits: list[int], in_splits: list[int],
                  channel: str | None, direction: str, index: torch.Tensor | None = None,
                  label: str = "") -> Pending:
        """Encode per peer, one all_to_all, decode per peer on wait (on the current stream).

        intB codecs read send rows through `index` (no gathered copy); fp32 gathers them once.
        """
        tail = tuple(rows.shape[1:])
        mpi = self.over_mpi() and not (channel is not None and self.config.staleness > 0)  # stale: waited later
        source = rows.flatten(1)
        width, dtype = source.shape[1], source.dtype
        stats = self.stats[channel or label or f"{direction}.eval"]
        send_names = [("fp32" if channel is None or dtype != torch.float32
                       else codec.for_width(self.bits_for(channel, self.rank, p), width)) for p in range(self.num_peers)]
        recv_names = [("fp32" if channel is None or dtype != torch.float32
                       else codec.for_width(self.bits_for(channel, p, self.rank), width)) for p in range(self.num_peers)]
        if all(n == "fp32" for n in send_names + recv_names):
            flat = (source[index] if index is not None else source).contiguous()
            out = torch.empty(out_rows, width, dtype=dtype, device=flat.device)
            work = transport.all_to_all(out, flat, out_splits, in_splits, group=self.group, async_op=True, mpi=mpi)
            stats.add([r * width * flat.element_size() for r in in_splits], in_splits, transport.is_mpi(work), out.nbytes)
            return Pending(work, lambda: out.view(out_rows, *tail), stats,
                           accumulate=lambda target, idx: add_per_peer(target, idx, out.view(out_rows, *tail),
                                                                       out_splits))
        nbytes = [codec.wire_bytes(r, width, n) for r, n in zip(in_splits, send_names)]
        send_buf = torch.empty(sum(nbytes), dtype=torch.uint8, device=source.device)
        distinct = self._distinct_send_rows() if index is self.send_idx else None
        scales = codec.encode_split(source, index, in_splits, send_names, send_buf, key=streams.dither_key(),
                                    distinct=distinct)  # the dither of the epoch's stream, apart from dropout's
        for p, (scale, count) in enumerate(zip(scales, in_splits)):
            if scale is not None:
                stats.qvar = stats.qvar + (scale.double() ** 2).sum() * (width / 6.0)
                stats.elements += count * width
                if self.policy is not None:
                    self.policy.observe(channel, p, width, scale, int(send_names[p][3:]))
        recv_bytes = [codec.wire_bytes(r, width, n) for r, n in zip(out_splits, recv_names)]
        out = torch.empty(sum(recv_bytes), dtype=torch.uint8, device=source.device)
        work = transport.all_to_all(out, send_buf, recv_bytes, nbytes, group=self.group, async_op=True, mpi=mpi)
        stats.add(nbytes, in_splits, transport.is_mpi(work), out.nbytes)

        def finish() -> torch.Tensor:
            res = torch.empty(out_rows, width, dtype=dtype, device=source.device)
            for p, (chunk, rows) in enumerate(zip(torch.split(out, recv_bytes), torch.split(res, out_splits))):
                if rows.shape[0]:
                    codec.decode_rows(chunk, recv_names[p], width, dtype, out=rows)  # straight into place
            return res.view(out_rows, *tail)

        def accumulate(target: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
            for p, (chunk, idx) in enumerate(zip(torch.split(out, recv_bytes), torch.split(index, out_splits))):
                codec.decode_rows_add(chunk, recv_names[p], width, target, idx)
            return target

        return Pending(work, finish, stats, accumulate=accumulate)

    def transfer(self, rows: torch.Tensor, out_rows: int, out_splits: list[int], in_splits: list[int],
                 channel: str | None = None, label: str = "") -> Pending:
        """An all-to-all of `rows` on this exchange's wire (MPI where its plans go, CUDA's side stream): encoded
        as `channel`'s settings say, or without one exact fp32 counted under `label`. For the plans of other
        parts (skipped rows) and modules (`gnn_dist.graph.relagg`)."""
        return self._a2a(rows, out_rows, out_splits, in_splits, channel, "fwd", label=label)

    def tensors(self) -> list:
        """What the exchange keeps between steps (its buffers in flight are a step's temporaries): the plan,
        the policies' blocks and references, the input features' halo (memory reports)."""
        return [self.send_idx, *self.stale.tensors(), *self.skip.tensors(), self._static, self._distinct]

    # ----------------------------------------------------------- directions
    def static_halo(self, x: torch.Tensor) -> torch.Tensor:
        """Halo rows of a tensor that never changes (the input features): sent once, fp32, then kept.

        Collective on first use: every rank calls it in the same layer of the same forward.
        """
        if self._static is None or self._static[0] is not x:
            pending = self._a2a(x.detach(), self.num_halo, self.recv_counts, self.send_counts, None, "fwd",
                                self.send_idx, label=STATIC)
            self._static = (x, pending.wait())
        return self._static[1]

    def provide(self, x: torch.Tensor, halo) -> None:
        """Declare x's halo, for exactly this tensor, while it lives: start(x) then sends nothing.

        `halo`: the rows, fetched already and autograd-tracked (`held(x)` gives them: layers aggregate x
        instead of x W, as it costs nothing), or a function of the exchange, called only if a layer does
        exchange x (the input cache: nothing is fetched for a layer that sends x W). x is held weakly (a
        step's dropped input would otherwise stand in backward's peak), and its entry goes with it."""
        key, given = id(x), self._given
        given[key] = (weakref.ref(x, lambda _, k=key: given.pop(k, None)), halo)

    def forget(self, x: torch.Tensor) -> None:
        """Drop what `provide` declared for x (`gnn_dist.runtime.halo_fetch.provided` does, leaving its block)."""
        entry = self._given.get(id(x))
        if entry is not None and entry[0]() is x:
            del self._given[id(x)]

    def _provided(self, x: torch.Tensor):
        entry = self._given.get(id(x))
        return entry[1] if entry is not None and entry[0]() is x else None

    def held(self, x: torch.Tensor) -> torch.Tensor | None:
        """x's halo if it was `provide`d as rows (at hand: no exchange), else None."""
        halo = self._provided(x)
        return halo if isinstance(halo, torch.Tensor) else None

    def start(self, x: torch.Tensor, channel: str | None = None):
        """Begin sending the rows peers need (x: this rank's inner rows); returns something to wait on.

        `channel` comes from `channel()`: None sends exact fp32 and touches no training state.
        """
        if (given := self._provided(x)) is not None:
            return Ready(given if isinstance(given, torch.Tensor) else given(self))
        x = x.detach()
        if channel is None:
            return self._a2a(x, self.num_halo, self.recv_counts, self.send_counts, None, "fwd", self.send_idx)
        if self.config.skip_threshold and channel not in self._fresh:
            return self.skip.start(self, x[self.send_idx], f"fwd.{channel}")
        pending = self._a2a(x, self.num_halo, self.recv_counts, self.send_counts, f"fwd.{channel}", "fwd", self.send_idx)
        return self._through_cache(f"fwd.{channel}", pending)

    def start_backward(self, halo_grad: torch.Tensor, channel: str | None = None):
        """Begin returning halo-row gradients to their owners, on the channel their forward used."""
        if channel is None:
            return self._a2a(halo_grad, int(self.send_idx.shape[0]), self.send_counts, self.recv_counts, None, "bwd")
        self.clock.backward()
        channel = f"bwd.{channel}"
        pending = self._a2a(halo_grad, int(self.send_idx.shape[0]), self.send_counts, self.recv_counts, channel, "bwd")
        return self._through_cache(channel, pending)

    def scatter_back(self, grad_inner: torch.Tensor, received) -> torch.Tensor:
        """Sum gradients that peers computed for our rows into our inner-row gradient.

        `received`: the decoded rows, or what start_backward returned (decoded straight into the sum).
        """
        if isinstance(received, torch.Tensor):
            received = Ready(received)
        return received.add_into(grad_inner, self.send_idx, self.send_counts)

    # ---------------------------------------------------------------- caches
    def _through_cache(self, channel: str, pending: Pending):
        """staleness S: the block this step uses while the fresh one travels (`stale`); `_fresh` ones pass by."""
        return pending if channel[4:] in self._fresh else self.stale.through(self.config, self.epoch, channel, pending)

    # ----------------------------------------------------------- checkpoints
    def state_dict(self) -> dict:
        """This rank's policy state, for a checkpoint (`gnn_dist.runtime.policy_state`: what and why)."""
        return policy_state.save(self)

    def state_mismatch(self, state: dict) -> str | None:
        """Why `state` cannot continue this exchange (another plan or other settings); None if it can."""
        return policy_state.mismatch(self, state)

    def load_state_dict(self, state: dict) -> None:
        policy_state.load(self, state)
