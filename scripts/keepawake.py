"""Spinners that keep this box's vCPUs awake while the lab's hosts wait out their CPU quota.

Why: a KVM guest's vCPU with nothing to run halts, and comes back slower (its host lent the core to
others, caches gone cold). A host at 0.25 core, idle three quarters of each CFS period, ran 1.31x slower
than a quarter of a core without them and 1.13x with (docs/benchmarks.md, "A cluster in a box"). A
spinner runs at SCHED_IDLE in a cgroup marked idle (`IDLE_GROUP`), so it takes only time nothing else
wants: SCHED_IDLE alone did not keep it from the hosts' groups (on kernel 6.18, four hosts at 0.45 core
got 0.21-0.23 core each beside the spinners, 0.42-0.45 with them in the idle group; docs/benchmarks.md, "The
spinners' group"). `netlab.py up --keep-awake`, `bench_cluster.py` (unless --no-keep-awake) and
`bench_busiest.py` start them.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gnn_dist.errors import LaunchError  # noqa: E402
from gnn_dist.runtime.cgroups import PROC, HostGroup  # noqa: E402

SPINNER = ["sh", "-c", "while :; do :; done"]


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies
# at the top of the cpu hierarchy, beside the lab's hosts' parent: a group weighs only against its siblings, so
# an idle group under a parent of normal weight took half the CPU from the hosts here, as SCHED_IDLE alone did
IDLE_GROUP = "gnn-dist-spin"


def idle_group(proc: str = PROC) -> HostGroup | None:
    """The spinners' cgroup, made idle; None (said in one line) where it cannot be made: the spinners then
    run at SCHED_IDLE alone, which on some kernels takes CPU time from the hosts' groups."""
    try:
        return HostGroup(IDLE_GROUP, idle=True).create("", proc)
    except (LaunchError, OSError) as e:
        print(f"keepawake: warning: no idle cgroup for the spinners ({e}); they may take CPU time from the "
              f"hosts", file=sys.stderr)
        return None


def spin(cpus: Iterable[int] | None = None, die_with_parent: bool = False, proc: str = PROC) -> list[int]:
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

    group = idle_group(proc)
    pids = []
    try:
        for cpu in sorted(cpus if cpus is not None else os.sched_getaffinity(0)):
            pids.append(subprocess.Popen(SPINNER, preexec_fn=idle(cpu), stdin=subprocess.DEVNULL).pid)
            if group is not None:
                group.join(pids[-1])
    except (LaunchError, OSError):
        unspin(pids, proc)
        raise
    return pids


def unspin(pids: list[int], proc: str = PROC) -> None:
    """Stop the spinners `spin` started (a pid that is no longer one of them is left alone), and remove their
    group where no other spinners are left in it."""
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:3] != [a.encode() for a in SPINNER]:
                continue
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except ChildProcessError:  # another process's spinner (netlab up's): gone from its group once it has exited
            for _ in range(100):
                if _exited(pid):
                    break
                time.sleep(0.01)
        except OSError:
            pass
    if pids:
        HostGroup.find("", IDLE_GROUP, proc).remove()  # left where others still spin in it


def _exited(pid: int) -> bool:
    """Gone, or a zombie (out of its groups already, waiting for a parent that may never reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
