"""A rank's sentinel: a helper process, forked at launch, that beats and watches for its rank (docs/design.md §9).

Why a process and not a thread: a thread cannot beat while its process is
stopped (SIGSTOP, swapping) or while a long call holds the GIL (a first numba
compile, a C extension), and a peer that stops hearing from it ends the run.
The sentinel beats while its parent lives, whatever the parent is doing. It
learns that its parent ended from the end of a pipe, at once, and says so in
the store, so peers leave within a fraction of a second instead of waiting
out the heartbeat timeout. It also makes every store call for its rank: a
store call that fails makes torch print C++ log lines, and the sentinel's
output goes nowhere.

What it no longer detects: a rank that is alive but hung (a deadlock, an
endless loop in C). Its sentinel keeps beating; its peers wait in their next
collective until `--timeout` and then fail (an all-to-all over MPI waits
without a timeout).

The store holds, under one prefix:
- `hb/R`: rank R's beat counter. Counters, not clocks, travel: a sentinel
  notes locally when a peer's counter last changed, so hosts need no
  synchronised time. A peer whose counter has not changed for the timeout
  is lost (only once it has been seen beating: a late starter is the
  rendezvous's business, which has its own timeout).
- `failed`: "RANK\\tCODE\\tWHY", written once (compare-and-set): the first
  failure wins. WHY is empty for an error a rank reported itself (its
  peers leave quietly, with its exit code), else the reason a rank was lost
  (every survivor names it).
- `left`: how many ranks other than 0 have gone after a failure; rank 0, whose
  process holds the store, leaves last (bounded wait), so no peer meets a
  closed store.

Pipes: the parent writes commands (`fail CODE WHY`, `drain SECONDS`, `x`:
leaving on purpose), the sentinel writes events (`ready`, `ok`, `failed RANK
CODE WHY`). After telling its parent to leave, the sentinel kills it if it
is still alive 10 s later (a parent stuck in a call that holds the GIL).
"""
from __future__ import annotations

import datetime
import gc
import os
import select
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable

from gnn_dist.runtime import cgroups

TICK_S = 0.1  # how often the sentinel looks for a published failure
KILL_AFTER_S = 10.0  # a parent told to leave that is still alive this much later is killed
LOST = 3  # exit code of a rank whose peer was lost
ABSENT = "\x00unset"  # a value no key of the store ever holds (see peek)


@dataclass
class Spec:
    """What a sentinel needs to reach the store and judge its peers."""
    host: str
    port: int
    rank: int
    world_size: int
    prefix: str  # store keys of this run (one launch of one context)
    period_s: float = 1.0  # beat every this many seconds
    timeout_s: float = 60.0  # a peer silent this long is lost
    store_timeout_s: float = 120.0


@dataclass
class Failure:
    rank: int
    code: int
    why: str  # empty: the rank reported its own error; else why it was lost

    def line(self) -> str | None:
        """What a survivor prints: nothing for a peer's own error (that peer printed it), else the lost rank."""
        return f"rank {self.rank} lost ({self.why}); aborting" if self.why else None

    @staticmethod
    def parse(text: str) -> "Failure":
        rank, code, why = (text.split("\t", 2) + ["", ""])[:3]
        return Failure(int(rank), int(code), why)

    def encode(self) -> str:
        return f"{self.rank}\t{self.code}\t{self.why}"


class Sentinel:
    """The parent's handle on its sentinel; `on_failure(Failure)` runs (in its own thread) when told to leave."""

    def __init__(self, spec: Spec, on_failure: Callable[[Failure], None]):
        self.spec, self.on_failure = spec, on_failure
        self.failure: Failure | None = None
        self.ready = threading.Event()
        self._told = threading.Event()
        self._drained = threading.Event()
        self._stopping = False
        cmd_r, self._cmd_w = os.pipe()
        self._evt_r, evt_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the sentinel: never returns
            _child(spec, cmd_r, evt_w)
        os.close(cmd_r)
        os.close(evt_w)
        os.register_at_fork(after_in_child=self._forget)  # a process this rank forks must not hide its death
        self._reader = threading.Thread(target=self._read, name="gnn-dist-sentinel", daemon=True)
        self._reader.start()

    # ------------------------------------------------------------- commands
    def _forget(self) -> None:
        """In a child this rank forks (a data loader's worker): drop the pipe, whose last writer must be the rank."""
        if self._cmd_w >= 0:
            os.close(self._cmd_w)
            self._cmd_w = -1

    def _send(self, line: str) -> None:
        try:
            os.write(self._cmd_w, (line + "\n").encode())
        except OSError:  # the sentinel is gone: nothing to tell
            pass

    def publish(self, code: int, why: str = "") -> None:
        """Tell every rank that this one failed (first failure wins); its peers leave with `code`."""
        self._send(f"fail\t{code}\t{why}")

    def drain(self, wait_s: float) -> None:
        """Rank 0 after a failure: wait (at most `wait_s`) until every other rank has gone."""
        self._drained.clear()
        self._send(f"drain\t{wait_s}")
        self._drained.wait(wait_s + 0.5)

    def leaving(self) -> None:
        """This process is about to exit on purpose: not a death to announce."""
        self._stopping = True
        self._send("x")

    def stop(self) -> None:
        """Close: the sentinel stops beating and exits; reap it (bounded)."""
        self.leaving()
        self._forget()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                if os.waitpid(self.pid, os.WNOHANG)[0]:
                    return
            except ChildProcessError:
                return
            time.sleep(0.01)

    def wait_failure(self, wait_s: float) -> Failure | None:
        """A failure the sentinel reported, waiting at most `wait_s` for one."""
        self._told.wait(wait_s)
        return self.failure

    # --------------------------------------------------------------- events
    def _read(self) -> None:
        buf = b""
        while True:
            try:
                data = os.read(self._evt_r, 4096)
            except OSError:
                data = b""
            if not data:
                break
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                self._event(line.decode())
        os.close(self._evt_r)
        if not self._stopping and self.ready.is_set() and self.failure is None:
            self._tell(Failure(self.spec.rank, LOST, "its heartbeat process ended"))

    def _event(self, line: str) -> None:
        kind, _, rest = line.partition("\t")
        if kind == "ready":
            self.ready.set()
        elif kind == "ok":
            self._drained.set()
        elif kind == "failed" and self.failure is None and not self._stopping:
            self._tell(Failure.parse(rest))

    def _tell(self, failure: Failure) -> None:
        self.failure = failure
        self._told.set()
        threading.Thread(target=self.on_failure, args=(failure,), name="gnn-dist-leave", daemon=True).start()


# ------------------------------------------------------------------ the child
def _child(spec: Spec, cmd_r: int, evt_w: int) -> None:
    """The sentinel process: no output, no Ctrl-C (the parent decides), no inherited descriptors, no return."""
    try:
        gc.disable()  # a collection would touch, and so copy, every page it shares with its parent
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        keep = {0, 1, 2, cmd_r, evt_w}
        for fd in [int(f) for f in os.listdir("/proc/self/fd")]:  # MPI's, hydra's, the parent's sockets
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        _Watch(spec, cmd_r, evt_w).run()
    finally:
        os._exit(0)


def peek(store, key: str) -> bytes | None:
    """A key's value, or None where it is unset, in one round trip without waiting: a compare-and-set whose
    expected value is never stored changes nothing (TCPStore.check, absent from torch 2.2, would take two)."""
    value = store.compare_set(key, ABSENT, ABSENT)
    return None if value == ABSENT.encode() else value


class _Watch:
    def __init__(self, spec: Spec, cmd_r: int, evt_w: int):
        self.spec, self.cmd_r, self.evt_w = spec, cmd_r, evt_w
        self.parent = os.getppid()
        self.key = lambda name: f"{spec.prefix}{name}"
        self.store = None
        self.on_purpose = False  # the parent said it is leaving on purpose
        self.told_at: float | None = None  # when the parent was told to leave
        self.buf = b""
        self.ooms = cgroups.oom_kills()  # the kernel's kills for memory in this group so far (a host's limit)

    def run(self) -> None:
        import torch.distributed as dist

        self.store = dist.TCPStore(self.spec.host, self.spec.port, None, False,
                                   datetime.timedelta(seconds=self.spec.store_timeout_s))
        self._emit("ready")
        peers = [r for r in range(self.spec.world_size) if r != self.spec.rank]
        last_val: dict[int, bytes] = {}
        last_change: dict[int, float] = {}
        beat, next_beat, prev = 0, 0.0, time.monotonic()
        while True:
            ready, _, _ = select.select([self.cmd_r], [], [], TICK_S)
            if ready and not self._commands():
                break  # the parent's end of the pipe closed: it has gone
            now = time.monotonic()
            if self.told_at is not None and now - self.told_at > KILL_AFTER_S:
                self._kill_parent()
            if self.store is None or self.on_purpose or self.told_at is not None:
                continue
            try:
                self._look_for_failure()
                if now >= next_beat:
                    beat += 1
                    self.store.set(self.key(f"hb/{self.spec.rank}"), str(beat))
                    if now - prev > 3 * self.spec.period_s:  # we (or the store) stalled: no peer could be seen
                        last_change = {r: now for r in last_change}
                    self._judge(peers, last_val, last_change, now)
                    prev, next_beat = now, now + self.spec.period_s
            except Exception:  # the store is gone: its host, rank 0, has ended
                self.store = None
                if self.spec.rank != 0 and not self.on_purpose:
                    self._tell(Failure(0, LOST, "rendezvous store on rank 0 unreachable"))
        self._parent_gone()

    def _commands(self) -> bool:
        data = os.read(self.cmd_r, 4096)
        if not data:
            return False
        self.buf += data
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            kind, _, rest = line.decode().partition("\t")
            if kind == "x":
                self.on_purpose = True
            elif kind == "fail":
                code, _, why = rest.partition("\t")
                self._publish(Failure(self.spec.rank, int(code), why))
            elif kind == "drain":
                self._drain(float(rest))
                self._emit("ok")
        return True

    def _publish(self, failure: Failure) -> Failure | None:
        """Compare-and-set: the failure now in the store (maybe an earlier one), or None without a store."""
        try:
            return Failure.parse(self.store.compare_set(self.key("failed"), "", failure.encode()).decode())
        except Exception:
            return None

    def _look_for_failure(self) -> None:
        value = peek(self.store, self.key("failed"))
        if value is not None:
            failure = Failure.parse(value.decode())
            if failure.rank != self.spec.rank:
                self._tell(failure)

    def _judge(self, peers: list[int], last_val: dict, last_change: dict, now: float) -> None:
        """A peer seen beating whose counter has not moved for the timeout is lost: say so for everyone."""
        seen = [r for r in peers if r in last_val]
        values = dict(zip(seen, self.store.multi_get([self.key(f"hb/{r}") for r in seen]))) if seen else {}
        for r in peers:
            if r not in values and (value := peek(self.store, self.key(f"hb/{r}"))) is not None:
                values[r] = value
        for r, val in values.items():
            if val != last_val.get(r):
                last_val[r], last_change[r] = val, now
            elif now - last_change[r] > self.spec.timeout_s:
                lost = Failure(r, LOST, f"no heartbeat for {self.spec.timeout_s:g} s")
                self._tell(self._publish(lost) or lost)
                return

    def _tell(self, failure: Failure) -> None:
        self.told_at = time.monotonic()
        self._emit(f"failed\t{failure.encode()}")

    def _drain(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                if int(self.store.add(self.key("left"), 0)) >= self.spec.world_size - 1:
                    return
            except Exception:
                return
            time.sleep(0.02)

    def _parent_gone(self) -> None:
        if self.store is None:
            return
        if not self.on_purpose:  # it died without a word: say so, so that its peers leave now
            why = "out of memory" if cgroups.oom_kills() > self.ooms else "its process ended"
            self._publish(Failure(self.spec.rank, LOST, why))
        if self.spec.rank != 0:
            try:
                self.store.add(self.key("left"), 1)
            except Exception:
                pass

    def _emit(self, line: str) -> None:
        try:
            os.write(self.evt_w, (line + "\n").encode())
        except OSError:
            pass

    def _kill_parent(self) -> None:
        try:
            if os.getppid() == self.parent:
                os.kill(self.parent, signal.SIGKILL)
        except OSError:
            pass
        self.told_at = float("inf")
