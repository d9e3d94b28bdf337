"""Spinners that keep this box's vCPUs awake while the lab's hosts wait out their CPU quota.

Why: a KVM guest's vCPU with nothing to run halts, and comes back slower (its host lent the core to
others, caches gone cold). A host at 0.25 core, idle three quarters of each CFS period, ran 1.31x slower
than a quarter of a core without them and 1.13x with (docs/benchmarks.md, "A cluster in a box"). A
spinner runs at SCHED_IDLE, so it takes only time nothing else wants. `netlab.py up --keep-awake` and
`bench_cluster.py` (unless --no-keep-awake) start them.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

SPINNER = ["sh", "-c", "while :; do :; done"]


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


def spin(cpus: Iterable[int] | None = None, die_with_parent: bool = False) -> list[int]:
    """One spinner per CPU of this box (or of `cpus`), at SCHED_IDLE; their pids (`unspin` stops them).
    `die_with_parent`: killed with the caller, however it ends (a benchmark killed by a signal runs no
    `finally`); netlab's outlive `up`, and `down` stops them."""
    def idle(cpu: int) -> Callable[[], None]:
        def become() -> None:
            os.sched_setaffinity(0, {cpu})
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            if die_with_parent:
                ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        return become

    return [subprocess.Popen(SPINNER, preexec_fn=idle(cpu), stdin=subprocess.DEVNULL).pid
            for cpu in sorted(cpus if cpus is not None else os.sched_getaffinity(0))]


def unspin(pids: list[int]) -> None:
    """Stop the spinners `spin` started (a pid that is no longer one of them is left alone)."""
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:3] != [a.encode() for a in SPINNER]:
                continue
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (OSError, ChildProcessError):
            pass
