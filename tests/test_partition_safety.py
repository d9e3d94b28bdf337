"""`gnn-dist partition` fails safe: a full disk and work too big for the memory are one line, nothing half-written.

Both are simulated in this process (no tmpfs or root needed): a write that raises ENOSPC partway through
the parts, and an available-memory figure smaller than the method's working set.
"""
from __future__ import annotations

import errno
import os

import pytest

from gnn_dist.cli.main import main
from partition import memory

SMALL = "sbm:nodes=300,classes=3,features=4,seed=1"  # quick to load: no PyG data set behind it


def _run(capsys, *argv: str) -> tuple[int, list[str]]:
    rc = main(["partition", *argv])
    err = capsys.readouterr().err
    return rc, [ln for ln in err.splitlines() if "error:" in ln]


def test_a_full_disk_is_one_line_and_leaves_the_old_partition(tmp_path, capsys, monkeypatch):
    out = tmp_path / "k"
    assert _run(capsys, "--dataset", SMALL, "--parts", "2", "--out", str(out))[0] == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    calls = []
    real_fsync = os.fsync

    def full(fd):  # the disk fills up at the fourth file: some parts are already staged
        calls.append(fd)
        if len(calls) >= 4:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    rc, errors = _run(capsys, "--dataset", SMALL, "--parts", "3", "--out", str(out), "--force")
    assert rc == 2 and len(errors) == 1, errors
    assert "No space left on device" in errors[0] and "nothing was written" in errors[0], errors
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k"]  # no staging folder left behind
    rc, errors = _run(capsys, "--dataset", SMALL, "--parts", "3", "--out", str(tmp_path / "new"))
    assert rc == 2 and len(errors) == 1 and not (tmp_path / "new").exists()


def test_work_beyond_the_memory_available_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: (64 << 10, "MemAvailable"))
    out = tmp_path / "c"
    rc, errors = _run(capsys, "--dataset", SMALL, "--parts", "2", "--out", str(out))
    assert rc == 2 and len(errors) == 1, errors
    assert "metis working set" in errors[0] and "exceeds the 0.00 GiB available (MemAvailable)" in errors[0]
    assert "--ignore-memory-check" in errors[0] and not out.exists()
    rc = main(["partition", "--dataset", SMALL, "--parts", "2", "--out", str(out), "--ignore-memory-check"])
    assert rc == 0 and "going on (--ignore-memory-check)" in capsys.readouterr().err and out.is_dir()
    monkeypatch.setattr(memory, "available_bytes", lambda: (1 << 40, "MemAvailable"))
    assert _run(capsys, "--dataset", SMALL, "--parts", "2", "--out", str(out), "--force")[0] == 0


def test_the_tightest_cgroup_limit_counts(tmp_path, monkeypatch):
    """Room under a limit is limit - usage + the page cache the kernel may drop; no limit is no figure."""
    inner, outer, free = tmp_path / "a" / "b", tmp_path / "a", tmp_path / "c"
    for d, limit, usage, cache in ((inner, 8 << 30, 7 << 30, 1 << 29), (outer, 4 << 30, 3 << 30, 0),
                                   (free, memory.UNLIMITED + 1, 1 << 30, 0)):
        d.mkdir(parents=True, exist_ok=True)
        (d / "memory.max").write_text(f"{limit}\n")
        (d / "memory.current").write_text(f"{usage}\n")
        (d / "memory.stat").write_text(f"anon 5\ninactive_file {cache}\n")
    dirs = [(d, "memory.max", "memory.current", "inactive_file") for d in (inner, outer)]
    monkeypatch.setattr(memory, "_cgroup_dirs", lambda: dirs)
    assert memory.cgroup_room() == 1 << 30  # the outer limit: 4 - 3 GiB, though the inner one leaves 1.5 GiB
    monkeypatch.setattr(memory, "_cgroup_dirs", lambda: [(free, "memory.max", "memory.current", "inactive_file")])
    assert memory.cgroup_room() is None
    assert memory.meminfo_available() is None or memory.meminfo_available() > 0


@pytest.mark.parametrize("method", ["metis", "fennel"])
def test_the_estimate_is_checked_for_every_method(tmp_path, capsys, monkeypatch, method):
    monkeypatch.setattr(memory, "available_bytes", lambda: (1 << 10, "the cgroup's limit"))
    rc, errors = _run(capsys, "--dataset", SMALL, "--parts", "2", "--method", method, "--out", str(tmp_path / "o"))
    assert rc == 2 and len(errors) == 1 and f"the {method} working set" in errors[0]
