"""Where a process's cgroups are, v1 and v2, read from /proc: the one reader for `partition.memory` (the
memory limit a partitioner must stay under) and `gnn_dist.runtime.cgroups` (CPU quotas, threads, the
lab's emulated hosts). Torch-free, like the rest of `partition`.

Layouts. v1 mounts a hierarchy per controller (some together, as cpu,cpuacct); v2 mounts one tree. A
process finds its groups in /proc/PID/cgroup, read against /proc/self/mountinfo: a container sees its own
group as the mount's root, so the path is taken relative to that root (never joined onto /sys/fs/cgroup
blindly). Every function takes `proc`, the /proc to read, so tests run them on a fake tree. A file that
cannot be read, or holds what the kernel never writes, reads as absent: a garbled cgroup file must not stop
a rank from starting.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROC = "/proc"


@dataclass(frozen=True)
class Mount:
    point: Path  # where the hierarchy is mounted
    root: str  # the group seen at that point (a container's own group: not "/")
    version: int  # 1 or 2
    controllers: frozenset


def mounts(proc: str = PROC) -> list[Mount]:
    """The cgroup hierarchies this process sees (its mountinfo), v1 and v2."""
    out = []
    for line in (read(Path(proc, "self", "mountinfo")) or "").splitlines():
        left, _, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if len(f) < 5 or len(r) < 3 or r[0] not in ("cgroup", "cgroup2"):
            continue
        point = Path(f[4].replace("\\040", " "))
        if r[0] == "cgroup2":
            out.append(Mount(point, f[3], 2, frozenset((read(point / "cgroup.controllers") or "").split())))
        else:
            out.append(Mount(point, f[3], 1, frozenset(r[2].split(",")) - {"rw", "ro"}))
    return out


def memberships(proc: str = PROC, pid: str = "self") -> dict[str, str]:
    """/proc/PID/cgroup as {controller: group path}; v2's line under ''."""
    out: dict[str, str] = {}
    for line in (read(Path(proc, pid, "cgroup")) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in (parts[1].split(",") if parts[1] else [""]):
                out[name] = parts[2]
    return out


def group_dir(controller: str, proc: str = PROC, pid: str = "self") -> tuple[Path, Mount] | None:
    """The directory of the group that holds process `pid` for `controller` (v1 first, else v2), and its
    mount; None where no mounted hierarchy has that controller."""
    groups = memberships(proc, pid)
    for m in sorted(mounts(proc), key=lambda m: m.version):
        if controller not in m.controllers:
            continue
        path = groups.get(controller if m.version == 1 else "")
        if path is None:
            continue
        rel = path[len(m.root):] if m.root != "/" and path.startswith(m.root) else path
        return m.point / rel.lstrip("/"), m
    return None


def ancestors(d: Path, m: Mount) -> Iterator[Path]:
    """`d`, then each group above it up to its mount's root: a limit anywhere on the way applies."""
    while True:
        yield d
        if d == m.point or m.point not in d.parents:
            return
        d = d.parent


def read(path: Path) -> str | None:
    """A cgroup or proc file's text, stripped; None where it cannot be read."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def number(text: str | None) -> int | None:
    """A file's single non-negative integer (ASCII digits, as the kernel writes: at most 20, 2^64's);
    None for anything else ("max", garbage, nothing)."""
    return int(text) if text is not None and len(text) <= 20 and text.isascii() and text.isdigit() else None


def counter(text: str | None, key: str) -> int:
    """`key N` from a flat-keyed file (memory.events, memory.stat, cpu.stat, memory.oom_control); 0 where absent."""
    for line in (text or "").splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == key and (n := number(words[1])) is not None:
            return n
    return 0
