"""cgroup files, v1 and v2: the CPUs and memory a process may use, and the groups that emulate hosts.

Why: a CPU quota caps a process far below the cores it sees (containers, Kubernetes CPU limits, SLURM,
the network lab's emulated hosts), and threads beyond the quota spin while throttled: a rank under a
0.45-core quota ran its epoch in 1.649 s with 2 threads against 1.325 s with one. So a rank's threads
follow `usable_cpus`, the smaller of its CPU affinity and the quotas of its cgroup and every group above
it, as Go's runtime and the JVM read them. The lab (scripts/netlab.py) makes one `HostGroup` per
emulated host: its own CPU quota and memory limit; a rank's sentinel asks `oom_kills` whether the
kernel killed a process of its group for memory.

Layouts. v1 mounts a hierarchy per controller (some together, as cpu,cpuacct): cpu.cfs_quota_us and
cpu.cfs_period_us, cpuacct.usage, memory.limit_in_bytes, memory.max_usage_in_bytes, memory.oom_control.
v2 mounts one tree: cpu.max, cpu.stat, memory.max, memory.peak, memory.events, a child's controllers
enabled in its parent's cgroup.subtree_control. A process finds its groups in /proc/self/cgroup, read
against /proc/self/mountinfo (a container sees its own group as the mount's root). Every function takes
`proc`, the /proc to read, so tests run them on a fake tree.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from partition.errors import LaunchError

PROC = "/proc"
MIN_QUOTA_US = 1000  # CFS refuses a quota under 1 ms (EINVAL, the old quota kept)
MAX_PERIOD_US = 1_000_000  # and a period over 1 s
# CFS charges a running task's time at the scheduler tick (4 ms at HZ=250, 10 ms at HZ=100) and refills the
# quota every period without carrying it over: with a period under the tick, the refills while a task runs
# between two ticks are lost. At 1 ms of quota every 1 ms a rank ran at 0.53 of a core, at 2 ms every 2 ms a
# busy loop at 0.5 (docs/benchmarks.md, "A cluster in a box"). So no default period is shorter than this.
MIN_PERIOD_US = 10_000


@dataclass(frozen=True)
class Mount:
    point: Path  # where the hierarchy is mounted
    root: str  # the group seen at that point (a container's own group: not "/")
    version: int  # 1 or 2
    controllers: frozenset


def mounts(proc: str = PROC) -> list[Mount]:
    """The cgroup hierarchies this process sees (its mountinfo), v1 and v2."""
    out = []
    try:
        lines = Path(proc, "self", "mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if len(f) < 5 or len(r) < 3 or r[0] not in ("cgroup", "cgroup2"):
            continue
        point = Path(f[4].replace("\\040", " "))
        if r[0] == "cgroup2":
            try:
                names = (point / "cgroup.controllers").read_text().split()
            except OSError:
                names = []
            out.append(Mount(point, f[3], 2, frozenset(names)))
        else:
            out.append(Mount(point, f[3], 1, frozenset(r[2].split(",")) - {"rw", "ro"}))
    return out


def _memberships(proc: str, pid: str) -> dict[str, str]:
    """/proc/PID/cgroup as {controller: group path}; v2's line under ''."""
    out: dict[str, str] = {}
    try:
        lines = Path(proc, pid, "cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in (parts[1].split(",") if parts[1] else [""]):
                out[name] = parts[2]
    return out


def group_dir(controller: str, proc: str = PROC, pid: str = "self") -> tuple[Path, Mount] | None:
    """The directory of the group that holds process `pid` for `controller` (v1 first, else v2), and its
    mount; None where no mounted hierarchy has that controller."""
    groups = _memberships(proc, pid)
    for m in sorted(mounts(proc), key=lambda m: m.version):
        if controller not in m.controllers:
            continue
        path = groups.get(controller if m.version == 1 else "")
        if path is None:
            continue
        rel = path[len(m.root):] if m.root != "/" and path.startswith(m.root) else path
        return m.point / rel.lstrip("/"), m
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _quota(d: Path, version: int) -> float | None:
    """One group's CPU quota in cores; None: unlimited (or unreadable)."""
    if version == 2:
        text = (_read(d / "cpu.max") or "max").split()
        return None if text[0] == "max" or len(text) < 2 else int(text[0]) / int(text[1])
    quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
    if quota is None or period is None or int(quota) < 0 or int(period) <= 0:
        return None
    return int(quota) / int(period)


def cpu_quota(proc: str = PROC) -> float | None:
    """The tightest CPU quota, in cores, of this process's group and the groups above it; None: none."""
    found = group_dir("cpu", proc)
    if found is None:
        return None
    d, m = found
    limits = []
    while True:
        q = _quota(d, m.version)
        if q is not None:
            limits.append(q)
        if d == m.point or d.parent == d:
            break
        d = d.parent
    return min(limits) if limits else None


def affinity_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def usable_cpus(proc: str = PROC, affinity: int | None = None) -> float:
    """The CPUs this process may use: its affinity, or its cgroups' quota where smaller (fractions kept)."""
    cpus = float(affinity if affinity is not None else affinity_cpus())
    quota = cpu_quota(proc)
    return cpus if quota is None else min(cpus, quota)


def threads_per_rank(usable: float, ranks_on_host: int) -> int:
    """A rank's intra-op threads: its host's usable CPUs over the ranks sharing them, at least one."""
    return max(1, math.floor(usable / max(1, ranks_on_host) + 1e-9))


def _counter(text: str | None, key: str) -> int:
    """`key N` from a flat-keyed file (memory.oom_control, memory.events, cpu.stat); 0 where absent."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def oom_kills(proc: str = PROC, pid: str = "self") -> int:
    """Processes the kernel has killed for memory in `pid`'s memory group (0 where none is readable)."""
    found = group_dir("memory", proc, pid)
    if found is None:
        return 0
    d, m = found
    return _counter(_read(d / ("memory.events" if m.version == 2 else "memory.oom_control")), "oom_kill")


# ------------------------------------------------------------------ emulated hosts (scripts/netlab.py)
def quota_period(cores: float, period_us: int | None = None) -> tuple[int, int]:
    """(quota, period) in microseconds for `cores`; by default at the shortest period CFS serves
    faithfully (`MIN_PERIOD_US`, longer where a 1 ms quota needs it): a short period spreads a slice over
    time the way a slower core would, where a long one runs a rank flat out and then stops it for most of
    the period (its peers wait)."""
    if not cores > 0:
        raise LaunchError(f"cores per host must be > 0, got {cores}")
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
    got = _read(path)
    if got is None or not (expect(got) if expect else got == value):
        raise LaunchError(f"cgroup {path} holds {got!r} after writing {value!r}")


@dataclass
class HostGroup:
    """One emulated host's groups: a CPU quota (cores), a memory limit (bytes), CPU time counted."""

    name: str
    cores: float | None = None
    memory: int | None = None
    dirs: dict = field(default_factory=dict)  # controller -> (directory, cgroup version)

    def create(self, parent: str, proc: str = PROC, period_us: int | None = None) -> "HostGroup":
        """Make the groups under this process's own, `parent`/`name` in each hierarchy, and set the limits."""
        for c in ("cpu", "memory", "cpuacct"):
            found = group_dir(c, proc)
            if found is None:
                if c == "cpuacct":  # v2 counts CPU time in the cpu group's cpu.stat; v1 without it: uncounted
                    continue
                need = "a CPU quota" if c == "cpu" else "a memory limit"
                raise LaunchError(f"no mounted cgroup hierarchy has the {c} controller (needed for {need})")
            own, m = found
            d = own / parent / self.name
            if m.version == 2:  # a v2 group gets a controller only where its parent enables it for children
                for p in (own, own / parent):
                    p.mkdir(exist_ok=True)
                    if c not in (_read(p / "cgroup.subtree_control") or "").split():
                        _write(p / "cgroup.subtree_control", f"+{c}", lambda got, c=c: c in got.replace("+", " ").split())
            d.mkdir(parents=True, exist_ok=True)
            self.dirs[c] = (d, m.version)
        self.limit(period_us)
        return self

    def limit(self, period_us: int | None = None) -> None:
        d, v = self.dirs["cpu"]
        if self.cores is not None:
            quota, period = quota_period(self.cores, period_us)
            if v == 2:
                _write(d / "cpu.max", f"{quota} {period}")
            else:
                _write(d / "cpu.cfs_period_us", str(period))
                _write(d / "cpu.cfs_quota_us", str(quota))
        d, v = self.dirs["memory"]
        if self.memory is not None:
            page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
            close = lambda got: abs(self.memory - int(got)) < page  # noqa: E731  (the kernel rounds to pages)
            if v == 2:
                _write(d / "memory.max", str(self.memory), close)
                if (d / "memory.swap.max").exists():  # a limited host that swapped would not be one out of memory
                    _write(d / "memory.swap.max", "0")
            else:
                _write(d / "memory.limit_in_bytes", str(self.memory), close)
                if (d / "memory.memsw.limit_in_bytes").exists():
                    _write(d / "memory.memsw.limit_in_bytes", str(self.memory), close)

    def join(self, pid: int) -> None:
        """Move process `pid` (and so every process it starts later) into this host's groups."""
        for d, _ in {str(d): (d, v) for d, v in self.dirs.values()}.values():
            _write(d / "cgroup.procs", str(pid), lambda got: True)

    def usage(self) -> dict:
        """CPU seconds, peak memory bytes, OOM kills and throttled periods so far."""
        cd, cv = self.dirs.get("cpuacct", self.dirs["cpu"])
        md, mv = self.dirs["memory"]
        cpu_s = (_counter(_read(cd / "cpu.stat"), "usage_usec") / 1e6 if cv == 2
                 else int(_read(cd / "cpuacct.usage") or 0) / 1e9 if "cpuacct" in self.dirs else None)
        peak = _read(md / ("memory.peak" if mv == 2 else "memory.max_usage_in_bytes"))
        d, v = self.dirs["cpu"]
        return {"cpu_s": cpu_s, "peak_bytes": int(peak) if peak and peak.isdigit() else None,
                "oom_kills": _counter(_read(md / ("memory.events" if mv == 2 else "memory.oom_control")), "oom_kill"),
                "throttled": _counter(_read(d / "cpu.stat"), "nr_throttled")}

    def pids(self) -> list[int]:
        text = _read(self.dirs["memory"][0] / "cgroup.procs") if "memory" in self.dirs else None
        return [int(p) for p in (text or "").split()]

    def remove(self) -> None:
        """Remove the groups (their processes must have ended); the empty parents left are removed too."""
        for d, _ in self.dirs.values():
            for p in (d, d.parent):
                try:
                    p.rmdir()
                except OSError:
                    pass
