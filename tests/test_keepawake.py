"""scripts/keepawake.py without root: the spinners run at SCHED_IDLE in a top-level group marked idle (on a
fake cgroup tree), and without such a group they still run, said in one line."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.test_cgroups import fake_tree, put

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import keepawake  # noqa: E402


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_spinners_join_an_idle_group_at_the_top_and_go(tmp_path):
    proc = fake_tree(tmp_path, 1, {"cpu": "/box", "cpuacct": "/box", "memory": "/box"})
    put(tmp_path / "cpu" / keepawake.IDLE_GROUP, cpu__idle="0")  # a kernel with cpu.idle
    cpu = sorted(os.sched_getaffinity(0))[0]
    pids = keepawake.spin([cpu], die_with_parent=True, proc=str(proc))
    try:
        group = tmp_path / "cpu" / keepawake.IDLE_GROUP  # at the top, not under the shell's /box
        assert (group / "cgroup.procs").read_text().split() == [str(pids[0])]
        assert (group / "cpu.idle").read_text() == "1"
        assert not (tmp_path / "memory" / keepawake.IDLE_GROUP).exists()  # only the cpu controller: it only yields
        assert os.sched_getscheduler(pids[0]) == os.SCHED_IDLE and os.sched_getaffinity(pids[0]) == {cpu}
    finally:
        keepawake.unspin(pids, str(proc))
    assert not alive(pids[0])


def test_without_a_group_the_spinners_still_run_said_in_one_line(tmp_path, capsys):
    proc = fake_tree(tmp_path, 1, {"cpu": "/", "cpuacct": "/", "memory": "/"})
    (tmp_path / "cpu" / keepawake.IDLE_GROUP).write_text("")  # the group cannot be made (as without root)
    pids = keepawake.spin([sorted(os.sched_getaffinity(0))[0]], die_with_parent=True, proc=str(proc))
    try:
        assert alive(pids[0])
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("keepawake: warning: no idle cgroup for the spinners")
    finally:
        keepawake.unspin(pids, str(proc))
    assert not alive(pids[0])
