"""Halo exchange (docs/design.md §4-6): one all_to_all per layer and direction, optionally cheap.

Forward sends `x[send_idx]` to the parts that hold those rows as halo; the
receive buffer *is* the halo block because the partitioner ordered halo rows
in the owner's send order. Backward is the mirror: halo-row gradients go back
to their owners and are summed in at `send_idx`.

Each (direction, layer) is a channel. Per channel and peer, messages may be
encoded (`codec`, or `adaptive` bit-widths from `gnn_dist.runtime.exchange.adaptive`), reused
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

The exchange is a thin facade over parts that own their state (docs/design.md): the frozen `HaloPlan`,
the `Wire` (group, transport, side stream: every collective), the `StepClock`, and one object per policy
(`StaleBlocks`, `SkippedRows`, `AdaptivePolicy`), saved in one envelope (`policy_state`). Statistics stay
on the device until the epoch's metrics are read.
"""
from __future__ import annotations

import collections
import dataclasses
import weakref

import torch

from gnn_dist.runtime import codec
from gnn_dist.runtime.exchange import policy_state, skip, stale
from gnn_dist.runtime.exchange.adaptive import AdaptivePolicy
from gnn_dist.runtime.exchange.config import ExchangeConfig
from gnn_dist.runtime.exchange.plan import HaloPlan
from gnn_dist.runtime.exchange.step_clock import StepClock
from gnn_dist.runtime.exchange.wire import Wire
from gnn_dist.runtime.transfers import ChannelStats, Pending, Ready
from partition.errors import UsageError

STATIC = "fwd.input"  # metrics channel of the one-off fetch of the input features' halo


class HaloExchange:
    """What layers and the loop call: start an exchange, wait, send gradients back, name channels, end steps.

    It holds one rank's `HaloPlan` and `Wire`, the step clock and the policies' parts, and keeps only what
    belongs to no part: the channels' statistics, the halos `provide`d for a tensor, and the input features'
    halo (`static_halo`). Building one runs no collective: `connect` (the loader's) agrees the wire first.
    """

    def __init__(self, plan: HaloPlan, wire: Wire, config: ExchangeConfig | None = None):
        if not isinstance(plan, HaloPlan) or not isinstance(wire, Wire):
            raise UsageError("HaloExchange(plan, wire, config) takes a HaloPlan and a Wire")
        if wire.device != plan.device:
            raise UsageError(f"the exchange's wire is on {wire.device} but its plan's rows are on {plan.device}")
        self.plan, self.wire = plan, wire
        self.config = (config or ExchangeConfig()).validate()
        self.stats: dict[str, ChannelStats] = collections.defaultdict(ChannelStats)
        self.clock = StepClock()  # the training step, and each training call's channel name
        self.stale = stale.StaleBlocks()  # each policy's state, owned by its part
        self.skip = skip.SkippedRows()
        self._fresh: set[str] = set()  # channels of owners with reuse_rows = False: never stale or skipped
        self._named: dict[str, None] = {}  # training channels named so far, in order (`reuse_report`)
        self._static: tuple | None = None  # (input features, their halo rows), fetched once
        self._given: dict[int, tuple] = {}  # id(x) -> (weak ref to x, its halo or a function giving it): `provide`
        self.policy = self._adaptive(self.config)
        self.auto_links: dict | None = None  # links measured by `--exchange auto` (`reconfigure`), kept for resume

    @classmethod
    def connect(cls, plan: HaloPlan, group, rank: int, config: ExchangeConfig | None = None) -> "HaloExchange":
        """Collective, once where a part is loaded (every rank of `group` alike): agree the wire for `plan`, measure
        the links an adaptive config budgets with, and build the exchange."""
        wire = Wire.agree(group, rank, plan.device, max(plan.num_halo, plan.num_send))
        return cls(plan, wire, wire.with_links((config or ExchangeConfig()).validate(), plan.num_peers))

    def _adaptive(self, config: ExchangeConfig) -> AdaptivePolicy | None:
        """The adaptive bit-width policy an adaptive config needs, else None."""
        return AdaptivePolicy(self.wire, config, self.plan.num_peers) if config.codec == "adaptive" else None

    def reconfigure(self, config: ExchangeConfig, auto_links: dict | None = None) -> None:
        """Switch to other settings before the first training exchange (`--exchange auto`'s choice, or the one a
        checkpoint was made under); `auto_links`: the links it measured, which an adaptive config then uses."""
        if self.clock.owners or self.clock.epoch:  # (a loaded state has begun too)
            raise RuntimeError("an exchange is reconfigured only before its first training exchange")
        if config.codec == "adaptive" and not config.links:  # the links measured, or the loader's
            config = dataclasses.replace(config, links=auto_links or self.config.links)
        self.config = config.validate()
        self.policy = self._adaptive(self.config)
        self.auto_links = auto_links

    # ------------------------------------------------- the plan and the wire
    send_idx = property(lambda self: self.plan.send_idx)
    send_counts = property(lambda self: list(self.plan.send_counts))
    recv_counts = property(lambda self: list(self.plan.recv_counts))
    num_halo = property(lambda self: self.plan.num_halo)
    num_peers = property(lambda self: self.plan.num_peers)
    device = property(lambda self: self.plan.device)
    group = property(lambda self: self.wire.group)
    rank = property(lambda self: self.wire.rank)

    def over_mpi(self) -> bool:
        """Whether this plan's all-to-alls travel over MPI (`transport`: small plans under mpiexec)."""
        return self.wire.mpi

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
        where `gnn_dist.runtime.exchange.step_clock` guesses they do for a loop that never calls it.
        """
        if not training:
            return None
        step = self.clock.epoch
        name = self.clock.name(owner)
        if self.clock.epoch != step and self.policy is not None:
            self.policy.maybe_solve(self.clock.epoch)
        if getattr(owner, "reuse_rows", True) is False:
            self._fresh.add(name)
        self._named.setdefault(name)
        return name

    def reuse_report(self) -> tuple[list[str], list[str]]:
        """(channels whose rows staleness or skipping may reuse, channels always sent fresh), of the training
        calls so far: what `--staleness` or `--skip-threshold` acts on in this model."""
        return [n for n in self._named if n not in self._fresh], [n for n in self._named if n in self._fresh]

    @property
    def epoch(self) -> int:
        """Training steps begun before the current one (`gnn_dist.runtime.exchange.step_clock`)."""
        return self.clock.epoch

    def loop_ends_steps(self) -> None:
        """Declare that the caller ends every training step with `end_step` (before the first), so that no step
        boundary is ever guessed: SGC's hops over its inputs are then one step, not one each."""
        self.clock.explicit = True

    def end_step(self) -> None:
        """The training step is over (call it after the optimiser step): the next training exchange begins the
        next one, and no step boundary is guessed from now on (`gnn_dist.runtime.exchange.step_clock`)."""
        self.clock.end_step()

    def drain(self) -> None:
        """Wait for every background (stale) exchange still in flight: a process group must not close under one."""
        for part in (self.stale, self.skip, self.policy):
            if part is not None:
                part.drain()

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
        """Send rows[index] (all of `rows` without one) on the wire, each peer's block in `channel`'s codec.

        No `channel`: exact fp32, counted under `label` (default: the direction's eval channel). A stale
        channel's blocks stay off MPI: they are waited for in a later step.
        """
        width, dtype = rows.flatten(1).shape[1], rows.dtype
        stats = self.stats[channel or label or f"{direction}.eval"]
        codec_of = lambda src, dst: ("fp32" if channel is None or dtype != torch.float32
                                     else codec.for_width(self.bits_for(channel, src, dst), width))
        send_codecs = [codec_of(self.rank, p) for p in range(self.num_peers)]
        recv_codecs = [codec_of(p, self.rank) for p in range(self.num_peers)]
        distinct = (lambda: self.plan.distinct) if index is self.plan.send_idx else None
        observe = None if self.policy is None else \
            lambda p, w, scale, bits: self.policy.observe(channel, p, w, scale, bits)
        return self.wire.send(rows, out_rows, out_splits, in_splits, stats, send_codecs, recv_codecs, index,
                              distinct, observe, mpi=not (channel is not None and self.config.staleness > 0))

    def transfer(self, rows: torch.Tensor, out_rows: int, out_splits: list[int], in_splits: list[int],
                 channel: str | None = None, label: str = "") -> Pending:
        """An all-to-all of `rows` on this exchange's wire (MPI where its plans go, CUDA's side stream): encoded
        as `channel`'s settings say, or without one exact fp32 counted under `label`. For the plans of other
        parts (skipped rows) and modules (`gnn_dist.graph.relagg`)."""
        return self._a2a(rows, out_rows, out_splits, in_splits, channel, "fwd", label=label)

    def tensors(self) -> list:
        """What the exchange keeps between steps (its buffers in flight are a step's temporaries): the plan,
        the policies' blocks and references, the input features' halo (memory reports)."""
        policy = [] if self.policy is None else self.policy.tensors()
        return [*self.plan.tensors(), *self.stale.tensors(), *self.skip.tensors(), *policy, self._static]

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
        """This rank's policy state, for a checkpoint (`gnn_dist.runtime.exchange.policy_state`: what and why)."""
        return policy_state.save(self)

    def state_mismatch(self, state: dict) -> str | None:
        """Why `state` cannot continue this exchange (another plan or other settings); None if it can."""
        return policy_state.mismatch(self, state)

    def load_state_dict(self, state: dict) -> None:
        policy_state.load(self, state)
