"""How much more memory this process may take: the kernel's MemAvailable, and a cgroup's limit if one is set.

`gnn-dist partition` compares the working set it estimates with this before it starts, so that work
which cannot fit is refused in one line instead of being OOM-killed (or swapping the machine) later.
A container's limit is usually far below the host's MemAvailable, so both count, and the smaller wins.
Page cache the kernel can drop (inactive file pages) counts as available in both.
"""
from __future__ import annotations

from pathlib import Path

UNLIMITED = 1 << 62  # cgroup v1 writes "no limit" as a number near 2^63
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _number(f: Path) -> int | None:
    try:
        text = f.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _stat(f: Path, key: str) -> int:
    try:
        for line in f.read_text().splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] == key and words[1].isdigit():
                return int(words[1])
    except OSError:
        pass
    return 0


def meminfo_available() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where there is no such file)."""
    return _stat(Path("/proc/meminfo"), "MemAvailable:") * 1024 or None


def _cgroup_dirs() -> list[tuple[Path, str, str, str]]:
    """(folder, limit file, usage file, reclaimable key) of this process's memory cgroup and its ancestors."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            base, files = CGROUP_ROOT, ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):  # cgroup v1
            base, files = CGROUP_ROOT / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes",
                                                  "total_inactive_file")
        else:
            continue
        d = base / path.lstrip("/")
        while True:
            out.append((d, *files))
            if d == base or base not in d.parents:
                break
            d = d.parent
    return out


def cgroup_room() -> int | None:
    """The room left under the tightest memory limit of this process's cgroups (None without a limit)."""
    rooms = []
    for d, limit_file, usage_file, reclaimable in _cgroup_dirs():
        limit, usage = _number(d / limit_file), _number(d / usage_file)
        if limit is not None and usage is not None and limit < UNLIMITED:
            rooms.append(max(limit - usage + _stat(d / "memory.stat", reclaimable), 0))
    return min(rooms) if rooms else None


def available_bytes() -> tuple[int | None, str]:
    """(bytes this process may still allocate, where the figure comes from); (None, "") where unknown."""
    found = [(b, what) for b, what in ((meminfo_available(), "MemAvailable"), (cgroup_room(), "the cgroup's limit"))
             if b is not None]
    return min(found) if found else (None, "")
