"""How much more memory this process may take: the kernel's MemAvailable, and a cgroup's limit if one is set.

`gnn-dist partition` compares the working set it estimates with this before it starts, so that work
which cannot fit is refused in one line instead of being OOM-killed (or swapping the machine) later.
A container's limit is usually far below the host's MemAvailable, so both count, and the smaller wins.
Page cache the kernel can drop (inactive file pages) counts as available in both.
"""
from __future__ import annotations

from pathlib import Path

from partition.cgroups import ancestors, counter, group_dir, number, read

UNLIMITED = 1 << 62  # cgroup v1 writes "no limit" as a number near 2^63


def meminfo_available() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where there is no such file)."""
    return counter(read(Path("/proc/meminfo")), "MemAvailable:") * 1024 or None


def _cgroup_dirs() -> list[tuple[Path, str, str, str]]:
    """(folder, limit file, usage file, reclaimable key) of this process's memory cgroup and its ancestors."""
    found = group_dir("memory")
    if found is None:
        return []
    d, m = found
    files = (("memory.max", "memory.current", "inactive_file") if m.version == 2 else
             ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"))
    return [(g, *files) for g in ancestors(d, m)]


def cgroup_room() -> int | None:
    """The room left under the tightest memory limit of this process's cgroups (None without a limit)."""
    rooms = []
    for d, limit_file, usage_file, reclaimable in _cgroup_dirs():
        limit, usage = number(read(d / limit_file)), number(read(d / usage_file))
        if limit is not None and usage is not None and limit < UNLIMITED:
            rooms.append(max(limit - usage + counter(read(d / "memory.stat"), reclaimable), 0))
    return min(rooms) if rooms else None


def available_bytes() -> tuple[int | None, str]:
    """(bytes this process may still allocate, where the figure comes from); (None, "") where unknown."""
    found = [(b, what) for b, what in ((meminfo_available(), "MemAvailable"), (cgroup_room(), "the cgroup's limit"))
             if b is not None]
    return min(found) if found else (None, "")
