"""The one training loop: node classification, link prediction and dynamic graphs plug into it as tasks.

The loop owns what every task shares: the seed (rank 0's, broadcast), the
per-epoch dropout streams, the optimiser and its learning-rate schedule,
evaluation every N epochs, the JSON-lines log and TensorBoard, atomic
checkpoints and resuming, the best weights and early stopping, and the
progress (gnn_dist.progress). A task owns what differs: how an epoch's loss is formed
(`train_epoch`, which hands each loss to `Loop.step`), how the model is
scored (`evaluate`), and which validation metric, if any, says "better".

Each rank's loss is the sum over its own rows divided by the global count,
and `step` sums the gradients over ranks, so an epoch here equals an epoch
of one process on the whole graph.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Protocol

import torch

from gnn_dist.progress import Progress, resolve
from gnn_dist.runtime import streams
from gnn_dist.runtime.collectives import all_sum, broadcast, count_sum, sum_gradients, sync_parameters
from gnn_dist.runtime.launch import DistContext
from gnn_dist.train import checkpoint
from gnn_dist.train.optim import make_optimizer, make_schedule
from partition.errors import UsageError


class Task(Protocol):
    """What a kind of training brings to the loop."""

    monitor: str | None  # the validation metric (higher is better) for best weights and early stopping; None: none

    def train_epoch(self, loop: "Loop", epoch: int) -> float:
        """One epoch's mean loss; every optimiser step goes through `loop.step`."""

    def evaluate(self) -> dict:
        """Scores over all ranks, exact messages (eval mode, no autograd)."""

    def epoch_record(self) -> dict:
        """Extra per-epoch figures for the log (bytes sent, plan time)."""

    def finish(self) -> None:
        """Called once after the last epoch (e.g. drain background exchanges)."""

    def exchanges(self) -> list:
        """The halo exchanges a training step may use: the loop ends their steps (`HaloExchange.end_step`)."""


class Loop:
    def __init__(self, model: torch.nn.Module, task: Task, ctx: DistContext, *, optimizer: str = "adam",
                 lr: float = 0.01, weight_decay: float = 5e-4, seed: int = 0, log_path: str | None = None,
                 checkpoint_dir: str | None = None, checkpoint_every: int = 0, eval_every: int = 1,
                 progress: bool | str = True, lr_schedule: str = "none", epochs: int = 0, lr_step: int = 50,
                 lr_gamma: float = 0.5, early_stop: int = 0, keep_best: bool = False,
                 memory_report: int | None = None, log_first: dict | None = None, model_spec: dict | None = None):
        self.model, self.task, self.ctx = model.to(ctx.device), task, ctx
        self.seed = int(broadcast(torch.tensor([seed], dtype=torch.int64), ctx)[0])  # rank 0's seed rules
        self.opt = make_optimizer(optimizer, self.model, lr, weight_decay)
        self.sched = make_schedule(lr_schedule, self.opt, epochs, lr_step, lr_gamma)
        if (early_stop or keep_best) and task.monitor is None:
            raise UsageError("--early-stop and --keep-best need a validation metric, and this task has none "
                             "(dynamic graphs score train and test periods only)")
        self.early_stop, self.keep_best = early_stop, keep_best or early_stop > 0
        self.best: dict = {}
        self.history: list[dict] = []  # per-epoch records (without per-channel details), for curves
        self.tensorboard = None  # a gnn_dist.train.tblog.TensorBoardLog on rank 0, if asked for
        self.log_path = Path(log_path) if log_path and ctx.is_main else None
        if self.log_path is not None:  # a missing folder is made, as for --save-model and --plot
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.ckpt = Path(checkpoint_dir) / "checkpoint.pt" if checkpoint_dir else None
        self.model_spec = model_spec  # the flags that built the model (gnn_dist.cli.model_file.spec), in checkpoints
        self.checkpoint_every, self.eval_every = checkpoint_every, eval_every
        self.progress = resolve(progress) if ctx.is_main else "none"  # bar | lines | none (gnn_dist.progress)
        self.memory_report = memory_report  # the runtime's resident bytes before loading: report after one epoch
        self.reduce_s = 0.0  # this epoch's seconds in the gradient all-reduce: waiting for the slowest rank
        self.log_first = {**rank_threads(ctx), **(log_first or {})}  # what the run's first logged epoch carries
        sync_parameters(self.model, ctx)
        if log_path:  # why the run ended, even if the launcher drops our stderr: any rank that fails first
            ctx.on_fail.append(lambda message: _append_error(Path(log_path), ctx.rank, message))

    # ------------------------------------------------------------------ steps
    def begin_epoch(self, epoch: int) -> int:
        """Open this epoch's random streams (dropout, dither: per rank); returns its input-dropout key (the
        same on every rank). The streams close when the epoch's `train_epoch` returns. The task's exchanges
        learn that `step` ends their steps (`HaloExchange.loop_ends_steps`)."""
        streams.begin(self.seed, epoch, self.ctx.rank)
        for ex in self.task.exchanges():  # steps end where this loop says, never guessed
            ex.loop_ends_steps()
        self.model.train()
        return streams.input_key(self.seed, epoch)

    def step(self, loss_sum: torch.Tensor, count: float) -> float:
        """Backpropagate loss_sum / count, sum gradients over ranks, step; the loss sum over all ranks."""
        self.opt.zero_grad(set_to_none=False)
        (loss_sum / count).backward()
        t = time.perf_counter()
        total = sum_gradients(self.model, self.ctx, loss_sum)
        self.reduce_s += time.perf_counter() - t
        self.opt.step()
        for ex in self.task.exchanges():
            ex.end_step()
        return float(total[0])

    def train_epoch(self, epoch: int) -> float:
        graph = getattr(self.task, "graph", None)
        try:
            if self.memory_report is not None and graph is not None:
                from gnn_dist.train import memory

                meter = memory.StepMeter(memory.known_storages(list(self.model.parameters()), graph.x))
                with meter.measuring():
                    loss = self.task.train_epoch(self, epoch)
                memory.print_reports(memory.report(graph, self.model, self.opt, meter, self.memory_report), self.ctx)
                self.memory_report = None
            else:
                loss = self.task.train_epoch(self, epoch)
        finally:
            streams.end()
        if self.sched is not None:
            self.sched.step()
        return loss

    def evaluate(self) -> dict:
        return self.task.evaluate()

    # ------------------------------------------------------------------- loop
    def fit(self, epochs: int, resume: bool = False) -> dict:
        start = self._resume() if resume else 0
        record: dict = {}
        finished = start >= epochs
        if finished:  # a finished run resumed: nothing to train, its checkpoint's metrics
            self._say((f"already at epoch {start} of {epochs}" if start == epochs else
                       f"the checkpoint is at epoch {start}, past --epochs {epochs}")
                      + ": nothing left to train (--epochs is the total); the checkpoint's metrics follow")
            record = {"epoch": start - 1}
        bar = Progress(epochs, "train", "epochs", self.progress, initial=min(start, epochs))
        for epoch in range(start, epochs):
            t0, self.reduce_s = time.perf_counter(), 0.0
            loss = self.train_epoch(epoch)
            dt = time.perf_counter() - t0
            if epoch == start and self.ctx.is_main and (line := reuse_line(self._exchange())) is not None:
                bar.write(f"[gnn-dist] {line}")
            record = {"epoch": epoch, "loss": loss, "epoch_time": dt, **self.task.epoch_record()}
            record.update(rank_times(dt, self.reduce_s, record.get("halo", {}), self.ctx))
            if epoch + 1 == epochs or (self.eval_every and (epoch + 1) % self.eval_every == 0):
                t0 = time.perf_counter()
                record.update(self.task.evaluate())
                record["eval_time"] = time.perf_counter() - t0
            record["lr"] = self.opt.param_groups[0]["lr"]
            self._log(record)
            bar.set_postfix(loss=f"{loss:.4f}", epoch_s=f"{dt:.3f}",
                            **{self.task.monitor: f"{record[self.task.monitor]:.3f}"} if self.task.monitor in record else {})
            bar.update()
            stop = self.keep_best and self.task.monitor in record and self._track_best(epoch, record)
            if self.ckpt and self.checkpoint_every and (epoch + 1) % self.checkpoint_every == 0:
                self.save_checkpoint(epoch)  # after this epoch's best weights and patience are counted
            if stop:
                bar.close()  # its last line first, then why it stopped
                self._say(f"early stop after epoch {epoch + 1}: {self.task.monitor} has not improved for "
                          f"{self.early_stop} evaluations (best {self.best['value']:.4f} after epoch "
                          f"{self.best['epoch'] + 1})")
                break
        bar.close()
        self.task.finish()
        if self.best:  # report (and keep) the weights of the best validation epoch
            self.model.load_state_dict(self.best["model"])
            record = dict(record, **self.task.evaluate(), best_epoch=self.best["epoch"])
        elif not any(k.startswith("test_") for k in record) and (epochs > start or record):
            record.update(self.task.evaluate())
        if finished:  # the log says what this run did: it trained nothing and evaluated the checkpoint's weights
            self._log(dict(record, resumed_finished=True), history=False)  # no epoch trained: no curve point
        return record

    def _track_best(self, epoch: int, record: dict) -> bool:
        """Remember the best weights (rank 0 also writes best.pt); True when patience has run out."""
        value = record[self.task.monitor]
        if not self.best or value > self.best["value"]:
            state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            self.best = {"value": value, "epoch": epoch, "model": state, "stale": 0}
            if self.ckpt:
                whole = checkpoint.model_state(self.model, self.ctx)  # every rank: rank-local rows are gathered
                if self.ctx.is_main:
                    checkpoint.save_atomic(checkpoint.stamped(checkpoint.BEST, epoch=int(epoch), metric=self.task.monitor,
                                                              value=float(value), state=whole),
                                           self.ckpt.with_name("best.pt"))
            return False
        self.best["stale"] += 1
        return bool(self.early_stop) and self.best["stale"] >= self.early_stop

    def _say(self, line: str) -> None:
        if self.ctx.is_main:
            sys.stderr.write(f"[gnn-dist] {line}\n")

    def _log(self, record: dict, history: bool = True) -> None:
        record.update(self.log_first)
        self.log_first = {}
        if history:
            self.history.append({k: v for k, v in record.items() if k != "halo"})
        if self.tensorboard is not None:
            self.tensorboard.write(record)
        if self.log_path is not None:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(record) + "\n")

    # ------------------------------------------------------------ checkpoints
    def save_checkpoint(self, epoch: int) -> None:
        """Every rank calls this (rank-local rows and every rank's exchange state are gathered); rank 0 writes."""
        model, opt = checkpoint.model_state(self.model, self.ctx), checkpoint.optimizer_state(self.opt, self.ctx)
        ex = self._exchange()
        exchange = checkpoint.gather_objects(ex.state_dict(), self.ctx) if ex is not None else None
        best = None if not self.best else {"value": float(self.best["value"]), "epoch": int(self.best["epoch"]),
                                           "stale": int(self.best["stale"]),
                                           "state": checkpoint.model_state(self.model, self.ctx, self.best["model"])}
        if self.ctx.is_main:
            checkpoint.save_atomic(checkpoint.stamped(
                checkpoint.CHECKPOINT, epoch=int(epoch), seed=int(self.seed), world_size=self.ctx.world_size,
                model=model, optimizer=opt, schedule=self.sched.state_dict() if self.sched else None,
                exchange=exchange, best=best, model_spec=self.model_spec), self.ckpt)

    def _exchange(self):
        """The exchange whose policy state checkpoints carry; None without one (one rank; snapshot sequences,
        whose exchanges are per snapshot group, resume without theirs: `gnn_dist.train.dynamic`)."""
        return getattr(getattr(self.task, "graph", None), "exchange", None)

    def _resume(self) -> int:
        """Model, optimiser, schedule, seed and (same rank count) the exchange's policy state, from rank 0's file."""
        state, mine = checkpoint.receive(self.ckpt, self.ctx)
        if not state:
            self._say(f"no checkpoint in {self.ckpt.parent if self.ckpt else 'the checkpoint folder'}: "
                      f"starting from epoch 0")
            return 0
        checkpoint.load_model_state(self.model, state["model"], f"checkpoint {self.ckpt}", state.get("model_spec"),
                                    self.model_spec, self._say)
        checkpoint.load_optimizer_state(self.opt, state["optimizer"], f"checkpoint {self.ckpt}")
        if self.sched is not None and state.get("schedule"):
            self.sched.load_state_dict(state["schedule"])
        self.seed = int(state["seed"])  # the run's random streams go on as they were
        if state.get("best"):  # early stopping's patience and the best weights so far go on too
            best = state["best"]
            self.best = {"value": best["value"], "epoch": best["epoch"], "stale": best["stale"],
                         "model": checkpoint.own_model_state(self.model, best["state"])}
        if not self._resume_exchange(state, mine):
            self._say(f"resumed from {self.ckpt}, written after epoch {int(state['epoch']) + 1} (counted from 1)")
        return int(state["epoch"]) + 1

    def _resume_exchange(self, state: dict, mine: dict | None) -> bool:
        """Continue the exchange's policies where the checkpoint left them, on every rank or on none (the
        adaptive bit table must agree everywhere); one line when they start afresh instead (then True: the
        resume has been told)."""
        ex, saved = self._exchange(), state.get("world_size")
        if saved != self.ctx.world_size:
            self._say(f"resumed on {self.ctx.world_size} ranks from a checkpoint of {saved}: model and optimiser "
                      f"restored exactly; the exchange's policy state (stale blocks, skip references, adaptive "
                      f"bit-widths, step count) starts afresh")
            return True
        if ex is None or mine is None:
            return False
        why = ex.state_mismatch(mine)
        if why is not None and ex.auto_links is not None:  # --exchange auto chose otherwise
            from gnn_dist.train import advice

            name = advice.adopt(ex, mine)
            if name is not None:
                why = None
                self._say(f"--exchange auto: {name}, as the checkpoint was trained (resumed exactly)")
        if count_sum(why is not None, self.ctx):
            self._say(f"resumed after epoch {state['epoch'] + 1} (counted from 1): model and optimiser restored; the "
                      f"exchange's policy "
                      f"state starts afresh ({why or 'another rank: its halo plan differs'})")
            return True
        ex.load_state_dict(mine)
        return False


def reuse_line(ex) -> str | None:
    """What `--staleness` or `--skip-threshold` acts on, from the channels of a first training step (None without
    either): a model whose layers all send rows after dropout would otherwise ignore the flag silently."""
    if ex is None or not ex.config.reuses_rows:
        return None
    c = ex.config
    flag = f"--staleness {c.staleness}" if c.staleness else f"--skip-threshold {c.skip_threshold:g}"
    reused, fresh = ex.reuse_report()
    if not reused:
        return (f"{flag} acts on no channel of this model: its layers ({', '.join(fresh) or 'none'}) send rows after "
                f"dropout (x W, a new mask each step), which always go fresh (docs/exchange.md); a hidden layer that "
                f"aggregates its input (gcn or sage with --layers 3, gin) or --dropout 0 gives it one")
    return f"{flag} acts on channels {', '.join(reused)}" + (
        f"; {', '.join(fresh)} go fresh (rows after dropout: docs/exchange.md)" if fresh else "")


def rank_times(epoch_s: float, reduce_s: float, halo: dict, ctx: DistContext) -> dict:
    """Every rank's compute and wait seconds of this epoch, and its halo bytes out and in and seconds of
    overlap (work done while its rows travelled), gathered in one small all-reduce.

    Wait is time blocked on others: the halo all-to-alls of training (their channels' `wait_s`) and the
    gradient all-reduce, where a rank waits for the slowest; compute is the rest of the rank's epoch.
    """
    train = [c for name, c in halo.items() if not name.endswith("eval")]
    wait = reduce_s + sum(c.get("wait_s", 0.0) for c in train)
    sent = sum(sum(c.get("bytes", [])) for c in train)
    table = torch.zeros(ctx.world_size, 5, dtype=torch.float64)
    table[ctx.rank] = torch.tensor([epoch_s - wait, wait, sent, sum(c.get("recv_bytes", 0) for c in train),
                                    sum(c.get("overlap_s", 0.0) for c in train)], dtype=torch.float64)
    table = all_sum(table, ctx).cpu()
    return {"rank_compute_s": [round(v, 6) for v in table[:, 0].tolist()],
            "rank_wait_s": [round(v, 6) for v in table[:, 1].tolist()],
            "rank_sent_bytes": [int(v) for v in table[:, 2].tolist()],
            "rank_recv_bytes": [int(v) for v in table[:, 3].tolist()],
            "rank_overlap_s": [round(v, 6) for v in table[:, 4].tolist()]}


def rank_threads(ctx: DistContext) -> dict:
    """Every rank's threads and usable CPUs (gnn_dist.runtime.launch), gathered once for the first logged epoch."""
    table = torch.zeros(ctx.world_size, 2, dtype=torch.float64)
    table[ctx.rank] = torch.tensor([ctx.threads, ctx.usable_cpus], dtype=torch.float64)
    table = all_sum(table, ctx).cpu()
    return {"rank_threads": [int(v) for v in table[:, 0].tolist()],
            "rank_usable_cpus": [round(v, 4) for v in table[:, 1].tolist()]}


def _append_error(log: Path, rank: int, message: str) -> None:
    """One JSON line; ranks that share rank 0's filesystem can all record it (best effort, never raises)."""
    if log.parent.is_dir():
        with open(log, "a") as f:
            f.write(json.dumps({"error": message, "rank": rank}) + "\n")
