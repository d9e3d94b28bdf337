"""cgroup files (gnn_dist.runtime.cgroups): the CPUs a rank may use and the threads it takes, read from fake v1
and v2 trees as a container, SLURM or the network lab lays them out; the lab's host groups written into them
with every write checked; and, as root only, a real lab whose ranks and sentinels sit in their host's groups."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gnn_dist.errors import LaunchError
from gnn_dist.runtime import cgroups
from gnn_dist.runtime.cgroups import HostGroup, quota_period, threads_per_rank, usable_cpus

ROOT = Path(__file__).resolve().parents[1]


def fake_tree(tmp: Path, version: int, groups: dict[str, str], mount_root: str = "/") -> Path:
    """A /proc (self/mountinfo, self/cgroup) over cgroup mounts under `tmp`; `groups`: controller -> path."""
    proc = tmp / "proc"
    (proc / "self").mkdir(parents=True)
    if version == 2:
        point = tmp / "unified"
        point.mkdir()
        (point / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        info = [f"41 23 0:38 {mount_root} {point} rw,relatime - cgroup2 cgroup2 rw"]
        lines = [f"0::{groups['']}"]
    else:
        info, lines = [], []
        for i, name in enumerate(["cpu", "cpuacct", "memory"]):
            point = tmp / name
            point.mkdir()
            info.append(f"{32 + i} 31 0:{29 + i} {mount_root} {point} rw,relatime - cgroup cgroup rw,{name}")
            lines.append(f"{i + 1}:{name}:{groups[name]}")
    info.insert(0, "25 1 0:23 / /proc rw,nosuid - proc proc rw")
    (proc / "self" / "mountinfo").write_text("\n".join(info) + "\n")
    (proc / "self" / "cgroup").write_text("\n".join(lines + ["9:name=systemd:/"]) + "\n")
    return proc


def put(d: Path, **files: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name.replace("__", ".")).write_text(text + "\n")


def test_v1_quota_is_the_tightest_of_the_group_and_its_parents(tmp_path):
    proc = fake_tree(tmp_path, 1, {"cpu": "/slurm/job7/step0", "cpuacct": "/", "memory": "/slurm/job7"})
    put(tmp_path / "cpu", cpu__cfs_quota_us="-1", cpu__cfs_period_us="100000")
    put(tmp_path / "cpu" / "slurm" / "job7", cpu__cfs_quota_us="150000", cpu__cfs_period_us="100000")  # 1.5 cores
    put(tmp_path / "cpu" / "slurm" / "job7" / "step0", cpu__cfs_quota_us="-1", cpu__cfs_period_us="100000")
    assert cgroups.cpu_quota(str(proc)) == 1.5
    assert usable_cpus(str(proc), affinity=8) == 1.5 and usable_cpus(str(proc), affinity=1) == 1.0
    put(tmp_path / "cpu" / "slurm" / "job7" / "step0", cpu__cfs_quota_us="45000", cpu__cfs_period_us="100000")
    assert usable_cpus(str(proc), affinity=2) == pytest.approx(0.45)
    put(tmp_path / "cpu" / "slurm" / "job7" / "step0", cpu__cfs_quota_us="4500", cpu__cfs_period_us="10000")
    assert cgroups.cpu_quota_period_s(str(proc)) == pytest.approx(0.01)  # the tightest quota's period
    put(tmp_path / "memory" / "slurm" / "job7", memory__oom_control="oom_kill_disable 0\nunder_oom 0\noom_kill 3")
    assert cgroups.oom_kills(str(proc)) == 3


def test_v2_quota_inside_a_container_whose_group_is_the_mounts_root(tmp_path):
    """A container without a cgroup namespace mounts its own group at /sys/fs/cgroup: mountinfo's root field
    names it, and /proc/self/cgroup's path starts with it."""
    proc = fake_tree(tmp_path, 2, {"": "/kubepods/pod1/ctr"}, mount_root="/kubepods/pod1/ctr")
    put(tmp_path / "unified", cpu__max="90000 100000", memory__events="low 0\nhigh 0\nmax 4\noom 2\noom_kill 1")
    assert cgroups.cpu_quota(str(proc)) == pytest.approx(0.9) and cgroups.cpu_quota_period_s(str(proc)) == 0.1
    assert usable_cpus(str(proc), affinity=4) == pytest.approx(0.9)
    assert cgroups.oom_kills(str(proc)) == 1
    put(tmp_path / "unified", cpu__max="max 100000")
    assert cgroups.cpu_quota(str(proc)) is None and usable_cpus(str(proc), affinity=4) == 4.0


def test_no_cgroups_mounted_leaves_the_affinity(tmp_path):
    """`ip netns exec` mounts a fresh /sys, hiding /sys/fs/cgroup: the affinity is all a process can read."""
    proc = tmp_path / "proc"
    put(proc / "self", mountinfo="25 1 0:23 / /proc rw - proc proc rw", cgroup="0::/")
    assert cgroups.cpu_quota(str(proc)) is None and usable_cpus(str(proc), affinity=3) == 3.0
    assert cgroups.oom_kills(str(proc)) == 0
    assert cgroups.cpu_quota(str(tmp_path / "nowhere")) is None


@pytest.mark.parametrize("usable, ranks, threads", [(2.0, 1, 2), (2.0, 2, 1), (2.0, 4, 1), (0.45, 1, 1), (0.22, 1, 1),
                                                    (16.0, 3, 5), (1.5, 1, 1), (8.0, 8, 1), (3.9999999999, 2, 2)])
def test_threads_per_rank_is_the_floor_of_usable_cpus_over_ranks_and_at_least_one(usable, ranks, threads):
    assert threads_per_rank(usable, ranks) == threads


def test_ranks_bound_to_cores_of_their_own_do_not_divide_them_again():
    from gnn_dist.runtime.rendezvous import ranks_sharing

    unbound = [[0, 1, 2, 3]] * 4
    assert ranks_sharing([0, 1, 2, 3], unbound) == 4 and threads_per_rank(4.0, ranks_sharing([0, 1, 2, 3], unbound)) == 1
    bound = [[0, 1], [2, 3], [4, 5], [6, 7]]  # srun --cpus-per-task 2: each rank its own two cores
    assert ranks_sharing([2, 3], bound) == 1 and threads_per_rank(2.0, ranks_sharing([2, 3], bound)) == 2
    assert ranks_sharing([0, 1], [[0, 1], [0, 1], [2, 3]]) == 2  # two bound to the same pair share it
    assert ranks_sharing([], unbound) == 4 and ranks_sharing([5], [[]]) == 1  # affinity unknown: all share


def test_ranks_bound_apart_still_share_their_groups_quota(tmp_path):
    """Two ranks on CPUs 0-31 and 32-63 of a pod with a 4-core quota: 2 CPUs each, not 4 (8 threads spinning)."""
    proc = fake_tree(tmp_path, 2, {"": "/pod"})
    put(tmp_path / "unified" / "pod", cpu__max="400000 100000")
    assert cgroups.rank_cpus(sharing=1, in_group=2, proc=str(proc), affinity=32) == 2.0
    assert cgroups.rank_cpus(sharing=2, in_group=2, proc=str(proc), affinity=2) == 1.0  # the affinity is tighter
    assert cgroups.rank_cpus(sharing=4, in_group=4, proc=str(tmp_path / "none"), affinity=8) == 2.0  # no quota


def test_the_group_that_sets_the_quota_is_what_ranks_compare(tmp_path):
    """Two tasks in sibling groups under one limited job group (SLURM's task_N): both name the job's group."""
    procs = [fake_tree(tmp_path, 2, {"": "/job/task_0"}), tmp_path / "proc1"]
    (procs[1] / "self").mkdir(parents=True)
    (procs[1] / "self" / "mountinfo").write_text((procs[0] / "self" / "mountinfo").read_text())
    (procs[1] / "self" / "cgroup").write_text("0::/job/task_1\n")
    put(tmp_path / "unified" / "job", cpu__max="200000 100000")
    for task in ("task_0", "task_1"):
        put(tmp_path / "unified" / "job" / task, cpu__max="max 100000")
    job = (tmp_path / "unified" / "job").stat()
    assert [cgroups.quota_group(str(p)) for p in procs] == [(job.st_dev, job.st_ino)] * 2
    assert cgroups.cpu_quota(str(procs[1])) == 2.0 and cgroups.quota_group(str(tmp_path / "none")) is None


def test_digits_the_kernel_never_writes_read_as_no_limit(tmp_path):
    from partition.cgroups import counter, number

    for text in ("\u00b2", "\u0665\u0660", "9" * 5000, "1e400", "-1", "", None):
        assert number(text) is None
    assert counter("oom_kill \u00b2\noom_kill 3", "oom_kill") == 3 and number("18446744073709551615") == 2**64 - 1


def test_quota_at_the_shortest_period_cfs_serves_faithfully():
    """10 ms, not the 1 ms quota CFS allows: a period under the scheduler tick loses the refills a running task
    could use (at 1 ms per 1 ms a rank ran at half a core); a smaller share takes a longer period."""
    assert quota_period(0.22) == (2200, 10000) and quota_period(0.45) == (4500, 10000)
    assert quota_period(1.0) == (10000, 10000) and quota_period(2.5) == (25000, 10000)
    assert quota_period(0.05) == (1000, 20000)
    assert quota_period(0.5, 2000) == (1000, 2000) and quota_period(0.22, 4546) == (1000, 4546)  # asked for
    for bad in (0.0, -1.0, 0.0009, float("inf"), float("nan")):
        with pytest.raises(LaunchError, match="cores"):
            quota_period(bad)
    with pytest.raises(LaunchError, match="period"):
        quota_period(0.5, 500)
    with pytest.raises(LaunchError, match="floor"):
        quota_period(0.05, 10000)


def test_host_group_on_v1_writes_limits_joins_and_counts(tmp_path):
    """The groups go at the top of each hierarchy, not under the group of the shell that made them (here /box)."""
    proc = fake_tree(tmp_path, 1, {"cpu": "/", "cpuacct": "/", "memory": "/box"})
    host = HostGroup("gdl0", cores=0.22, memory=2 * 2**30).create("lab", str(proc))
    cpu, memory = tmp_path / "cpu" / "lab" / "gdl0", tmp_path / "memory" / "lab" / "gdl0"
    assert (cpu / "cpu.cfs_period_us").read_text() == "10000" and (cpu / "cpu.cfs_quota_us").read_text() == "2200"
    assert (memory / "memory.limit_in_bytes").read_text() == str(2 * 2**30)
    host.join(4242)
    for d in (cpu, memory, tmp_path / "cpuacct" / "lab" / "gdl0"):
        assert (d / "cgroup.procs").read_text() == "4242"
    assert host.pids() == [4242]
    put(tmp_path / "cpuacct" / "lab" / "gdl0", cpuacct__usage="2500000000")
    put(memory, memory__max_usage_in_bytes="1048576", memory__oom_control="oom_kill_disable 0\noom_kill 2")
    put(cpu, cpu__stat="nr_periods 10\nnr_throttled 7\nthrottled_time 5")
    assert host.usage() == {"cpu_s": 2.5, "peak_bytes": 1048576, "oom_kills": 2, "throttled": 7}
    host.reset_peak()
    assert host.usage()["peak_bytes"] == 0
    assert host.remove() == [cpu, memory, tmp_path / "cpuacct" / "lab" / "gdl0"]  # files inside: as processes would
    for f in list(cpu.iterdir()) + list(memory.iterdir()) + list((tmp_path / "cpuacct" / "lab" / "gdl0").iterdir()):
        f.unlink()  # the kernel's files go with the group; a fake tree's must go first
    assert host.remove() == []
    assert not cpu.exists() and not memory.exists() and not (tmp_path / "cpu" / "lab").exists()


def test_a_join_the_kernel_did_not_take_is_one_line(tmp_path):
    proc = fake_tree(tmp_path, 1, {"cpu": "/", "cpuacct": "/", "memory": "/"})
    host = HostGroup("gdl0", cores=0.5).create("lab", str(proc))
    (tmp_path / "memory" / "lab" / "gdl0" / "cgroup.procs").symlink_to(os.devnull)
    with pytest.raises(LaunchError, match=r"cgroup.procs holds '' after writing '77'"):
        host.join(77)


def test_host_group_on_v2_enables_controllers_from_the_root(tmp_path):
    """The shell's own group (/lab-owner) holds processes, so v2 would refuse it children with controllers:
    the hosts go under the mount's root, which may."""
    proc = fake_tree(tmp_path, 2, {"": "/lab-owner"})
    put(tmp_path / "unified" / "lab-owner", cgroup__subtree_control="", cgroup__procs="1234")
    put(tmp_path / "unified", cgroup__subtree_control="")
    written = []
    real = cgroups._write
    monkey = lambda path, value, expect=None: written.append((path.parent.name, value)) or real(path, value, expect)  # noqa: E731
    cgroups._write, saved = monkey, cgroups._write
    try:
        HostGroup("gdl1", cores=0.45, memory=512 * 2**20).create("lab", str(proc))
    finally:
        cgroups._write = saved
    d = tmp_path / "unified" / "lab" / "gdl1"
    assert (d / "cpu.max").read_text() == "4500 10000" and (d / "memory.max").read_text() == str(512 * 2**20)
    enabled = [(g, v) for g, v in written if v.startswith("+")]
    assert enabled == [("unified", "+cpu"), ("lab", "+cpu"), ("unified", "+memory"), ("lab", "+memory")]
    assert (tmp_path / "unified" / "lab-owner" / "cgroup.subtree_control").read_text() == "\n"  # left alone


def test_garbled_cgroup_files_read_as_no_limit(tmp_path):
    """What the kernel never writes must not stop a rank from starting: no quota, the affinity stands."""
    for version, files in ((1, dict(cpu__cfs_quota_us="lots", cpu__cfs_period_us="100000")),
                           (2, dict(cpu__max="50000 0")), (2, dict(cpu__max="\x00\x01")), (2, dict(cpu__max="1 2 3"))):
        tmp = tmp_path / f"v{version}-{len(list(tmp_path.iterdir()))}"
        proc = fake_tree(tmp, version, {"": "/g", "cpu": "/g", "cpuacct": "/g", "memory": "/g"})
        put((tmp / ("unified" if version == 2 else "cpu")) / "g", **files)
        assert cgroups.cpu_quota(str(proc)) is None and usable_cpus(str(proc), affinity=2) == 2.0


def test_a_host_needs_only_the_controllers_its_limits_use(tmp_path):
    proc = fake_tree(tmp_path, 1, {"cpu": "/", "cpuacct": "/", "memory": "/"})
    for name in ("memory",):
        (proc / "self" / "mountinfo").write_text("\n".join(
            line for line in (proc / "self" / "mountinfo").read_text().splitlines() if not line.endswith(name)) + "\n")
    host = HostGroup("gdl0", cores=0.5).create("lab", str(proc))
    assert set(host.dirs) == {"cpu", "cpuacct"} and host.usage()["peak_bytes"] is None
    with pytest.raises(LaunchError, match="no mounted cgroup hierarchy has the memory controller"):
        HostGroup("gdl1", memory=2**30).create("lab", str(proc))


def test_a_refused_or_ignored_write_is_one_line(tmp_path):
    """CFS refuses a quota under 1 ms with EINVAL and keeps the old one: a write is checked by reading it back."""
    proc = fake_tree(tmp_path, 1, {"cpu": "/", "cpuacct": "/", "memory": "/"})
    cpu = tmp_path / "cpu" / "lab" / "gdl0"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").symlink_to(os.devnull)  # takes the write, keeps nothing: as an ignored value
    with pytest.raises(LaunchError, match=r"cpu.cfs_quota_us holds '' after writing '5000'"):
        HostGroup("gdl0", cores=0.5).create("lab", str(proc))
    (cpu / "cpu.cfs_quota_us").unlink()
    (cpu / "cpu.cfs_quota_us").mkdir()  # a write that fails outright
    with pytest.raises(LaunchError, match="cgroup refused '5000' for .*cpu.cfs_quota_us"):
        HostGroup("gdl0", cores=0.5).create("lab", str(proc))


def test_a_missing_controller_is_one_line(tmp_path):
    proc = fake_tree(tmp_path, 2, {"": "/"})
    (tmp_path / "unified" / "cgroup.controllers").write_text("cpuset io pids\n")  # this box's v2: no cpu, no memory
    with pytest.raises(LaunchError, match="no mounted cgroup hierarchy has the cpu controller"):
        HostGroup("gdl0", cores=0.5).create("lab", str(proc))


def test_netlab_without_root_says_so(monkeypatch, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    import netlab

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sys, "argv", ["netlab.py", "up", "--hosts", "2", "--cores-per-host", "0.5"])
    with pytest.raises(SystemExit, match="needs root"):
        netlab.main()
    assert netlab.parse_bytes("2G") == 2 * 2**30 and netlab.parse_bytes("512m") == 512 * 2**20
    with pytest.raises(SystemExit, match="--memory-per-host takes a size"):
        netlab.parse_bytes("lots")


def _lab_usable() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if not shutil.which("ip") or not shutil.which("nsenter"):
        return "needs iproute2 and nsenter"
    if Path("/run/gnn-dist-netlab.json").exists():
        return "a network lab is up on this box"
    return None


PROBE = """
import json, os, sys
from pathlib import Path
import gnn_dist as gd
from gnn_dist.runtime import cgroups
ctx = gd.init()
groups = lambda pid: {c: l.split(":", 2)[2] for l in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                      for c in l.split(":")[1].split(",") if c in ("cpu", "memory", "")}
Path(sys.argv[1], f"r{ctx.rank}.json").write_text(json.dumps({"rank": groups(os.getpid()),
    "sentinel": groups(ctx.sentinel.pid), "threads": ctx.threads, "usable": ctx.usable_cpus}))
ctx.close()
"""


@pytest.mark.slow
def test_lab_ranks_and_their_sentinels_live_in_their_hosts_groups(tmp_path):
    why = _lab_usable()
    if why:
        pytest.skip(why)
    lab = [sys.executable, str(ROOT / "scripts" / "netlab.py")]
    up = subprocess.run(lab + ["up", "--hosts", "2", "--rate", "none", "--cores-per-host", "0.5",
                               "--memory-per-host", "1G"], capture_output=True, text=True)
    if up.returncode != 0:
        pytest.skip(f"cannot make a lab here: {up.stderr.strip()}")
    try:
        state = json.loads(Path("/run/gnn-dist-netlab.json").read_text())
        (tmp_path / "probe.py").write_text(PROBE)
        r = subprocess.run(lab + ["run", "--timeout", "120", "--", sys.executable, str(tmp_path / "probe.py"),
                                  str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        cpus = len(os.sched_getaffinity(0))
        assert (f"1 thread per rank (0.5 CPUs each: {cpus} CPU{'s' * (cpus != 1)} in its affinity over 1 rank sharing "
                "them, a cgroup quota of 0.5 over 1 rank under it)") in r.stderr
        for k in range(2):
            got = json.loads((tmp_path / f"r{k}.json").read_text())
            dirs = {c: (Path(d), v) for c, (d, v) in state["groups"][k]["dirs"].items()}
            (cpu, v), (memory, _) = dirs["cpu"], dirs["memory"]
            if v == 2:
                assert (cpu / "cpu.max").read_text().split() == ["5000", "10000"]
                assert int((memory / "memory.max").read_text()) == 2**30
                assert "" in got["rank"]
            else:
                assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "5000"
                assert (cpu / "cpu.cfs_period_us").read_text().strip() == "10000"
                assert int((memory / "memory.limit_in_bytes").read_text()) == 2**30
                assert {"cpu", "memory"} <= set(got["rank"])
            controllers = [""] if v == 2 else ["cpu", "memory"]  # a v1 box may mount an empty v2 tree beside
            assert got["rank"] == got["sentinel"] and all(got["rank"][c] == f"/gnn-dist-lab/gdl{k}" for c in controllers)
            assert got["threads"] == 1 and got["usable"] == pytest.approx(0.5)
        status = subprocess.run(lab + ["status"], capture_output=True, text=True)
        assert status.returncode == 0 and "gdl1" in status.stdout, status.stderr
    finally:
        down = subprocess.run(lab + ["down"], capture_output=True, text=True)
    assert down.returncode == 0 and not Path("/run/gnn-dist-netlab.json").exists()
    assert not any((Path(d).exists() for g in state["groups"] for d, _ in g["dirs"].values()))


def test_an_idle_group_sits_at_the_top_and_weighs_least(tmp_path):
    """The lab's spinners' group (scripts/keepawake.py): cpu.idle where the kernel has it, else the least weight
    (cpu.shares 2 on v1, cpu.weight 1 on v2); at the mount's root, since a group weighs only against its siblings."""
    proc = fake_tree(tmp_path, 1, {"cpu": "/box", "cpuacct": "/", "memory": "/"})
    put(tmp_path / "cpu" / "spin", cpu__idle="0")
    g = HostGroup("spin", idle=True).create("", str(proc))
    assert (tmp_path / "cpu" / "spin" / "cpu.idle").read_text() == "1" and g.dirs["cpu"][0] == tmp_path / "cpu" / "spin"
    assert not (tmp_path / "cpu" / "spin" / "cpu.cfs_quota_us").exists()  # no quota: it only yields
    old = HostGroup("spin2", idle=True).create("", str(proc))
    assert (old.dirs["cpu"][0] / "cpu.shares").read_text() == "2" and not (old.dirs["cpu"][0] / "cpu.idle").exists()
    proc2 = fake_tree(tmp_path / "v2", 2, {"": "/"})
    put(tmp_path / "v2" / "unified", cgroup__subtree_control="cpu memory")
    v2 = HostGroup("spin", idle=True).create("", str(proc2))
    assert (v2.dirs["cpu"][0] / "cpu.weight").read_text() == "1"
