"""cgroup files, v1 and v2: the CPUs and memory a process may use, and the groups that emulate hosts.

Why: a CPU quota caps a process far below the cores it sees (containers, Kubernetes CPU limits, SLURM,
the network lab's emulated hosts), and threads beyond the quota spin while throttled: a rank under a
0.45-core quota ran its epoch in 1.649 s with 2 threads against 1.325 s with one. So a rank's threads
follow `rank_cpus`: its CPU affinity over the ranks sharing it, or the tightest quota of its cgroup and
the groups above it (as Go's runtime and the JVM read it) over the ranks under that quota, the smaller.
The lab (scripts/netlab.py) makes one `HostGroup` per emulated host: its own CPU quota and memory limit;
a rank's sentinel asks `oom_kills` whether the kernel killed a process of its group for memory.

Which groups a process is in, and where they are mounted, is `partition.cgroups` (shared with the
partitioner's memory check). The files read here: v1's cpu.cfs_quota_us, cpu.cfs_period_us,
cpuacct.usage, memory.limit_in_bytes, memory.max_usage_in_bytes, memory.oom_control; v2's cpu.max,
cpu.stat, memory.max, memory.peak, memory.events, a child's controllers enabled in its parent's
cgroup.subtree_control.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from gnn_dist.errors import LaunchError
from partition.cgroups import PROC, ancestors, counter, group_dir, number, read

MIN_QUOTA_US = 1000  # CFS refuses a quota under 1 ms (EINVAL, the old quota kept)
MAX_PERIOD_US = 1_000_000  # and a period over 1 s
# CFS charges a running task's time at the scheduler tick (4 ms at HZ=250, 10 ms at HZ=100) and refills the
# quota every period without carrying it over: with a period under the tick, the refills while a task runs
# between two ticks are lost. At 1 ms of quota every 1 ms a rank ran at 0.53 of a core, at 2 ms every 2 ms a
# busy loop at 0.5 (docs/benchmarks.md, "A cluster in a box"). So no default period is shorter than this.
MIN_PERIOD_US = 10_000


def _quota(d: Path, version: int) -> float | None:
    """One group's CPU quota in cores; None: unlimited (or unreadable)."""
    if version == 2:
        words = (read(d / "cpu.max") or "max").split()
        quota, period = (number(words[0]), number(words[1])) if len(words) == 2 else (None, None)
    else:  # v1 writes "no quota" as -1, which number() reads as absent
        quota, period = number(read(d / "cpu.cfs_quota_us")), number(read(d / "cpu.cfs_period_us"))
    return quota / period if quota and period else None


def _tightest(proc: str) -> tuple[float, Path] | None:
    found = group_dir("cpu", proc)
    if found is None:
        return None
    d, m = found
    return min(((q, g) for g in ancestors(d, m) if (q := _quota(g, m.version)) is not None), default=None,
               key=lambda qg: qg[0])


def cpu_quota(proc: str = PROC) -> float | None:
    """The tightest CPU quota, in cores, of this process's group and the groups above it; None: none."""
    tightest = _tightest(proc)
    return tightest[0] if tightest else None


def cpu_quota_period_s(proc: str = PROC) -> float:
    """The period, in seconds, of the tightest CPU quota (see cpu_quota); 0.1 (CFS's default) where none
    is set or it cannot be read."""
    tightest = _tightest(proc)
    if tightest is not None:
        d = tightest[1]
        words = (read(d / "cpu.max") or "").split()  # v2: "QUOTA PERIOD"; v1: its own file
        period = number(words[1]) if len(words) == 2 else number(read(d / "cpu.cfs_period_us"))
        if period:
            return period / 1e6
    return 0.1


def quota_group(proc: str = PROC) -> tuple[int, int] | None:
    """Which group sets that quota, as (device, inode) of its directory: the same group whatever path a
    container mounts it at, so ranks compare it to count who shares the quota (sibling groups under one
    limited parent do). None: no quota."""
    tightest = _tightest(proc)
    try:
        st = os.stat(tightest[1]) if tightest else None
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if st else None


def affinity_cpus() -> int:
    """The CPUs this process may be scheduled on (its affinity mask; all of them where that is not readable)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def usable_cpus(proc: str = PROC, affinity: int | None = None) -> float:
    """The CPUs this process may use: its affinity, or its cgroups' quota where smaller (fractions kept)."""
    cpus = float(affinity if affinity is not None else affinity_cpus())
    quota = cpu_quota(proc)
    return cpus if quota is None else min(cpus, quota)


def rank_cpus(sharing: int, in_group: int, proc: str = PROC, affinity: int | None = None) -> float:
    """The CPUs one rank may count on: its affinity over the ranks whose affinity overlaps it, or its
    groups' quota over the ranks under the group that sets it, whichever is smaller. Both divide: ranks a
    launcher bound to CPUs of their own still share a container's quota."""
    cpus = float(affinity if affinity is not None else affinity_cpus()) / max(1, sharing)
    quota = cpu_quota(proc)
    return cpus if quota is None else min(cpus, quota / max(1, in_group))


def threads_per_rank(usable: float, ranks: int = 1) -> int:
    """A rank's intra-op threads: `usable` CPUs over the `ranks` sharing them, at least one."""
    return max(1, math.floor(usable / max(1, ranks) + 1e-9))


def oom_kills(proc: str = PROC, pid: str = "self") -> int:
    """Processes the kernel has killed for memory in `pid`'s memory group (0 where none is readable)."""
    found = group_dir("memory", proc, pid)
    if found is None:
        return 0
    d, m = found
    return counter(read(d / ("memory.events" if m.version == 2 else "memory.oom_control")), "oom_kill")


# ------------------------------------------------------------------ emulated hosts (scripts/netlab.py)
def quota_period(cores: float, period_us: int | None = None) -> tuple[int, int]:
    """(quota, period) in microseconds for `cores`; by default at the shortest period CFS serves
    faithfully (`MIN_PERIOD_US`, longer where a 1 ms quota needs it): a short period spreads a slice over
    time the way a slower core would, where a long one runs a rank flat out and then stops it for most of
    the period (its peers wait)."""
    if not (cores > 0 and math.isfinite(cores)):
        raise LaunchError(f"cores per host must be a number > 0, got {cores}")
    if period_us is not None and not MIN_QUOTA_US <= period_us <= MAX_PERIOD_US:
        raise LaunchError(f"a CFS period must be {MIN_QUOTA_US} to {MAX_PERIOD_US} us, got {period_us}")
    period = period_us or min(MAX_PERIOD_US, max(MIN_PERIOD_US, math.ceil(MIN_QUOTA_US / cores)))
    quota = round(cores * period)
    if quota < MIN_QUOTA_US:
        raise LaunchError(f"{cores} cores in a {period} us period is a quota under CFS's floor of {MIN_QUOTA_US} us")
    return quota, period


def _write(path: Path, value: str, expect=None) -> None:
    """Write one cgroup file and read it back: the kernel refuses some values (EINVAL, keeping the old one)."""
    try:
        path.write_text(value)
    except OSError as e:
        raise LaunchError(f"cgroup refused {value!r} for {path}: {e.strerror or e}") from None
    got = read(path)
    if got is None or not (expect(got) if expect else got == value):
        raise LaunchError(f"cgroup {path} holds {got!r} after writing {value!r}")


@dataclass
class HostGroup:
    """One emulated host's groups: a CPU quota (cores), a memory limit (bytes), CPU time counted.

    The groups sit at the top of each hierarchy (`parent`/`name` under the mount point), not under the group
    of the shell that made them: the hosts are machines of their own, and v2 lets a group hand controllers to
    children only where it holds no processes itself, which the mount's root is exempt from."""

    name: str
    cores: float | None = None
    memory: int | None = None
    dirs: dict = field(default_factory=dict)  # controller -> (directory, cgroup version)
    # a group that takes only CPU time nothing else wants (the lab's spinners, scripts/keepawake.py): SCHED_IDLE
    # tasks alone did not (kernel 6.18: four hosts at 0.45 core got 0.21-0.23 each beside them, 0.42-0.45 here)
    idle: bool = False

    def create(self, parent: str, proc: str = PROC, period_us: int | None = None) -> "HostGroup":
        """Make the groups and set the limits. The controllers a limit needs must be mounted; the others
        (cpu, cpuacct and memory, for CPU time and peak memory in `usage`) are used where they are."""
        need = {"cpu": self.cores is not None or self.idle, "memory": self.memory is not None}
        for c in ("cpu",) if self.idle else ("cpu", "memory", "cpuacct"):  # an idle group only yields CPU
            found = group_dir(c, proc)
            if found is None:
                if need.get(c):
                    what = "a CPU quota" if c == "cpu" else "a memory limit"
                    raise LaunchError(f"no mounted cgroup hierarchy has the {c} controller (needed for {what})")
                continue
            _, m = found
            d = m.point / parent / self.name
            if m.version == 2:  # a v2 group gets a controller only where its parent enables it for children
                for p in (m.point, m.point / parent):
                    p.mkdir(exist_ok=True)
                    if c not in (read(p / "cgroup.subtree_control") or "").split():  # v2 has no cpuacct
                        _enable(p, c)
            d.mkdir(parents=True, exist_ok=True)
            self.dirs[c] = (d, m.version)
        self.limit(period_us)
        return self

    def limit(self, period_us: int | None = None) -> None:
        """Write the quota and the memory limit, each read back (a refused or ignored value is one line)."""
        if self.cores is not None:
            d, v = self.dirs["cpu"]
            quota, period = quota_period(self.cores, period_us)
            if v == 2:
                _write(d / "cpu.max", f"{quota} {period}")
            else:
                _write(d / "cpu.cfs_period_us", str(period))
                _write(d / "cpu.cfs_quota_us", str(quota))
        if self.idle:
            self._idle()
        if self.memory is not None:
            d, v = self.dirs["memory"]
            page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
            close = lambda got: got.isdigit() and abs(self.memory - int(got)) < page  # noqa: E731  (kernel rounds)
            if v == 2:
                _write(d / "memory.max", str(self.memory), close)
                if (d / "memory.swap.max").exists():  # a limited host that swapped would not be one out of memory
                    _write(d / "memory.swap.max", "0")
            else:
                _write(d / "memory.limit_in_bytes", str(self.memory), close)
                if (d / "memory.memsw.limit_in_bytes").exists():
                    _write(d / "memory.memsw.limit_in_bytes", str(self.memory), close)

    @classmethod
    def find(cls, parent: str, name: str, proc: str = PROC) -> "HostGroup":
        """The groups `create` made, where they still exist (none made here): for removing them."""
        group = cls(name)
        for c in ("cpu", "memory", "cpuacct"):
            found = group_dir(c, proc)
            if found is not None and (found[1].point / parent / name).is_dir():
                group.dirs[c] = (found[1].point / parent / name, found[1].version)
        return group

    def _idle(self) -> None:
        """cpu.idle (kernels from 5.15, v1 and v2): the group weighs as a SCHED_IDLE task; older kernels get
        the least weight they take instead."""
        d, v = self.dirs["cpu"]
        if (d / "cpu.idle").exists():
            _write(d / "cpu.idle", "1")
        else:
            _write(d / ("cpu.weight" if v == 2 else "cpu.shares"), "1" if v == 2 else "2")

    def _unique_dirs(self) -> list[tuple[Path, int]]:
        return list({str(d): (d, v) for d, v in self.dirs.values()}.values())  # cpu,cpuacct may share one

    def join(self, pid: int) -> None:
        """Move process `pid` (and so every process it starts later) into this host's groups."""
        for d, _ in self._unique_dirs():
            _write(d / "cgroup.procs", str(pid), lambda got: str(pid) in got.split())

    def reset_peak(self) -> None:
        """Start the peak memory over (v1; v2's memory.peak takes a reset from kernel 6.12): a lab kept up
        for several runs would otherwise report the largest since `up`."""
        if "memory" in self.dirs:
            d, v = self.dirs["memory"]
            try:
                (d / ("memory.peak" if v == 2 else "memory.max_usage_in_bytes")).write_text("0")
            except OSError:
                pass

    def usage(self) -> dict:
        """CPU seconds, peak memory bytes, OOM kills and throttled periods so far (None: not counted)."""
        cd, cv = self.dirs.get("cpuacct", self.dirs.get("cpu", (None, 0)))
        md, mv = self.dirs.get("memory", (None, 0))
        cpu_s = (None if cd is None else counter(read(cd / "cpu.stat"), "usage_usec") / 1e6 if cv == 2
                 else (number(read(cd / "cpuacct.usage")) or 0) / 1e9 if "cpuacct" in self.dirs else None)
        peak = number(read(md / ("memory.peak" if mv == 2 else "memory.max_usage_in_bytes"))) if md else None
        events = read(md / ("memory.events" if mv == 2 else "memory.oom_control")) if md else None
        cpu = self.dirs.get("cpu", (None, 0))[0]
        return {"cpu_s": cpu_s, "peak_bytes": peak, "oom_kills": counter(events, "oom_kill"),
                "throttled": counter(read(cpu / "cpu.stat"), "nr_throttled") if cpu else 0}

    def pids(self) -> list[int]:
        """Every process in any of this host's groups."""
        return sorted({int(p) for d, _ in self._unique_dirs() for p in (read(d / "cgroup.procs") or "").split()
                       if p.isdigit()})

    def remove(self) -> list[Path]:
        """Remove the groups (their processes must have ended) and the parent left empty; returns those that
        would not go (a process still inside)."""
        left = []
        for d, _ in self._unique_dirs():
            for p in (d, d.parent):
                try:
                    p.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    if p == d:
                        left.append(d)
        return left


def _enable(group: Path, controller: str) -> None:
    """+controller in a v2 group's cgroup.subtree_control, said in one line where the kernel refuses it."""
    try:
        _write(group / "cgroup.subtree_control", f"+{controller}", lambda got: controller in got.replace("+", " ").split())
    except LaunchError as e:
        raise LaunchError(f"{e} (cgroup v2 gives a group's children a controller only where the group holds no "
                          "processes: make the lab from the hierarchy's root)") from None
