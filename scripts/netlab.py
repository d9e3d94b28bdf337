"""Network lab: P emulated hosts on one box, joined by rate-limited veth links to a bridge.

    sudo python scripts/netlab.py up --hosts 4 --rate 1gbit|none [--delay 1ms] \\
                                     [--cores-per-host 0.22] [--memory-per-host 2G]
    sudo python scripts/netlab.py run -- python -m gnn_dist train --partition out/g-4 ...
    sudo python scripts/netlab.py status                   # each host's quota, limit, CPU time, peak memory
    sudo python scripts/netlab.py profile --out lab.json   # the cost model's profile of the lab's links
    sudo python scripts/netlab.py down

Each host namespace `gdlK` has one veth (`gdlKh`, address 10.77.0.K+1/24)
whose peer (`gdlKs`) sits on bridge `gdlbr` in the switch namespace `gdlsw`.
Both directions of every link go through `tc tbf` at --rate, so bytes on the
wire cost real time (`--rate none`: unshaped, for runs that emulate the hosts
but not the wire). `run` starts rank K in namespace gdlK with torchrun's
variables (MASTER_ADDR = host 0), so gnn-dist's launcher rendezvouses over
the lab links and gloo binds to the veth (it enters only the host's network
namespace: the box's files, /sys/fs/cgroup included, stay in view).

With --cores-per-host or --memory-per-host every host is a machine of its
own too: a cgroup per host (gnn_dist.runtime.cgroups; v1 or v2) holds a CPU
quota of C cores every 10 ms (a longer period where a 1 ms quota needs it;
one under the scheduler tick loses quota; --cfs-period-us sets another) and
a memory limit of M bytes, and every process `run` starts
for that host (the rank, its sentinel, anything they start) lives in it.
Ranks are then told they are alone on their host (LOCAL_WORLD_SIZE=1), so
each sizes its threads by its own quota. A host the kernel kills for memory
is reported as `rank K lost (out of memory)`. What the emulation does not
model: the box's one L3 and its memory bandwidth, shared by every host, and
the kernel's network stack, whose CPU time no host's quota pays.

Only these addresses and groups are used, and `down` removes everything `up`
made (processes left in a host's groups are killed first).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from keepawake import spin, unspin  # noqa: E402

from gnn_dist.runtime.cgroups import HostGroup, quota_period, usable_cpus  # noqa: E402
from partition.cgroups import mounts  # noqa: E402
from partition.errors import LaunchError  # noqa: E402

STATE = Path("/run/gnn-dist-netlab.json")
SUBNET = "10.77.0"
SWITCH = "gdlsw"
BRIDGE = "gdlbr"
GROUPS = "gnn-dist-lab"  # the hosts' cgroups: gnn-dist-lab/gdlK at the top of each cgroup hierarchy
MAX_HOSTS = 64  # addresses 10.77.0.1-64; `down` after a crash looks for as many
MIN_MEMORY = 64 * 2**20  # under this no Python process with torch starts: a typo, not a host
BURST_BYTES = 256 * 1024  # tbf's bucket ("256kb" to tc: kilobytes): what a link passes at line speed after a pause


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"netlab: `{' '.join(cmd)}` failed: {r.stderr.strip()}")
    return r


def ns(name: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return sh("ip", "netns", "exec", name, *cmd, check=check)


def shape(namespace: str, dev: str, rate: str, delay: str | None) -> None:
    """tbf for the rate; netem (if the kernel has it) under it for the delay."""
    ns(namespace, "tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "tbf", "rate", rate,
       "burst", f"{BURST_BYTES // 1024}kb", "latency", "50ms")
    if delay:
        r = ns(namespace, "tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "netem", "delay", delay,
               check=False)
        if r.returncode != 0:
            raise SystemExit(f"netlab: --delay needs the netem qdisc, which this kernel lacks ({r.stderr.strip()})")


def parse_bytes(text: str) -> int:
    """'2G', '512M', '1.5g', '2147483648': bytes (powers of 1024)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)i?b?\s*", str(text).lower())
    size = float(m.group(1)) * 1024 ** "bkmgt".index(m.group(2) or "b") if m else 0.0
    if not m or not math.isfinite(size):
        raise SystemExit(f"netlab: --memory-per-host takes a size such as 2G or 512M, got {str(text)[:40]!r}")
    if not MIN_MEMORY <= size < 2**62:
        raise SystemExit(f"netlab: --memory-per-host must be 64M or more (and finite), got {str(text)[:40]!r}")
    return int(size)


def rate_bytes_per_s(rate: str) -> float:
    """A tc rate in bytes per second, read as tc(8) reads it: bit (or a bare number) and bps (bytes) with k, m,
    g, t (powers of 1000) or ki, mi, gi, ti (powers of 1024): '1gbit', '200mbit', '125mbps', '100mibit';
    'none': unshaped, inf."""
    if rate == "none":
        return float("inf")
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)(?:([kmgt])(i?))?(bit|bps)?", rate.strip().lower())
    value = float(m.group(1)) * (1024 if m.group(3) else 1000) ** "_kmgt".index(m.group(2) or "_") if m else 0.0
    if not m or not 0 < value < float("inf") or (m.group(2) and not m.group(4)):
        raise SystemExit(f"netlab: a rate is a tc rate such as 1gbit or 200mbit (or none), got {rate!r}")
    return value if m.group(4) == "bps" else value / 8


def save_state(state: dict) -> None:
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(STATE)


def load_state() -> dict:
    if not STATE.exists():
        raise SystemExit("netlab: no lab is up (run `up` first)")
    return json.loads(STATE.read_text())


def host_groups(state: dict) -> list[HostGroup | None]:
    """Each host's cgroups as `up` made them (None: hosts share the box's cores and memory)."""
    return [None if g is None else HostGroup(g["name"], g.get("cores"), g.get("memory"),
                                             {c: (Path(d), v) for c, (d, v) in g["dirs"].items()})
            for g in state.get("groups") or [None] * state["hosts"]]


def up(hosts: int, rate: str, delay: str | None, cores: float | None = None, memory: int | None = None,
       period_us: int | None = None, keep_awake: bool = False) -> None:
    if STATE.exists():
        raise SystemExit(f"netlab: a lab is already up ({STATE}); run `down` first")
    if not 1 <= hosts <= MAX_HOSTS:
        raise SystemExit(f"netlab: --hosts must be 1 to {MAX_HOSTS}, got {hosts}")
    if rate == "none" and delay:
        raise SystemExit("netlab: --delay shapes the links, and --rate none leaves them unshaped")
    if period_us is not None and cores is None:
        raise SystemExit("netlab: --cfs-period-us is the period of --cores-per-host's quota, which is not set")
    rate_bytes_per_s(rate)  # every value is checked before anything is made
    try:
        if cores is not None:
            quota_period(cores, period_us)
    except LaunchError as e:
        raise SystemExit(f"netlab: {e}") from None
    if stale := [str(d) for g in stale_groups() for d, _ in g.dirs.values()]:  # another lab's, or a crash's
        raise SystemExit(f"netlab: a lab's cgroups exist ({stale[0]}); run `down` first")
    names = set(sh("ip", "netns", "list", check=False).stdout.split())
    if stale := sorted(names & {SWITCH, *(f"gdl{k}" for k in range(MAX_HOSTS))}):
        raise SystemExit(f"netlab: a lab's network namespaces exist ({', '.join(stale[:3])}); run `down` first")
    made = {"hosts": hosts, "rate": rate, "delay": delay, "namespaces": [], "cores": cores, "memory": memory,
            "period_us": period_us, "groups": None, "spinners": []}
    try:
        if cores is not None or memory is not None:
            made["groups"] = []
            for k in range(hosts):
                g = HostGroup(f"gdl{k}", cores, memory)
                made["groups"].append(g)  # before create: a half-made host is removed too
                g.create(GROUPS, period_us=period_us)
        sh("ip", "netns", "add", SWITCH)
        made["namespaces"].append(SWITCH)
        ns(SWITCH, "ip", "link", "add", BRIDGE, "type", "bridge")
        ns(SWITCH, "ip", "link", "set", BRIDGE, "up")
        for k in range(hosts):
            host, h, s = f"gdl{k}", f"gdl{k}h", f"gdl{k}s"
            sh("ip", "netns", "add", host)
            made["namespaces"].append(host)
            sh("ip", "link", "add", h, "netns", host, "type", "veth", "peer", "name", s, "netns", SWITCH)
            ns(host, "ip", "addr", "add", f"{SUBNET}.{k + 1}/24", "dev", h)
            ns(host, "ip", "link", "set", h, "up")
            ns(host, "ip", "link", "set", "lo", "up")
            ns(SWITCH, "ip", "link", "set", s, "master", BRIDGE)
            ns(SWITCH, "ip", "link", "set", s, "up")
            if rate != "none":
                shape(host, h, rate, delay)  # host -> switch
                shape(SWITCH, s, rate, delay)  # switch -> host
        if keep_awake:
            made["spinners"] = spin()
        groups = made["groups"]
        save_state(dict(made, groups=None if groups is None else [
            {"name": g.name, "cores": g.cores, "memory": g.memory,
             "dirs": {c: [str(d), v] for c, (d, v) in g.dirs.items()}} for g in groups]))
    except BaseException as e:
        unspin(made["spinners"])
        _remove(made["namespaces"], made["groups"] or [])
        if isinstance(e, LaunchError):
            raise SystemExit(f"netlab: {e}") from None
        raise
    if cores is not None and hosts * cores > usable_cpus() + 1e-9:
        print(f"netlab: warning: {hosts} hosts at {cores:g} cores are {hosts * cores:g} cores, and this box has "
              f"{usable_cpus():g}: the hosts will get less than their quota", file=sys.stderr)
    where = f" at {rate}" if rate != "none" else ", links unshaped"
    print(f"netlab: {hosts} hosts {SUBNET}.1-{hosts}{where}" + (f", delay {delay}" if delay else "") + _host_line(made))


def _host_line(state: dict) -> str:
    parts = []
    if state.get("cores") is not None:
        quota, period = quota_period(state["cores"], state.get("period_us"))
        parts.append(f"{quota / period:.4g} cores each ({quota} us every {period} us)")
    if state.get("memory") is not None:
        parts.append(f"{state['memory'] / 2**30:.3g} GiB each")
    return "; " + ", ".join(parts) if parts else "; hosts share the box's cores and memory"


def empty(groups: list, grace_s: float = 5.0) -> None:
    """Kill every process in the hosts' groups until none is left (one forking between a read of cgroup.procs
    and the kill lands in the group too, so the kill repeats), or `grace_s` has passed."""
    deadline = time.monotonic() + grace_s
    while (pids := [p for g in groups if g is not None and g.dirs for p in g.pids()]) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def _remove(namespaces: list[str], groups: list) -> list[Path]:
    """Remove the hosts' groups (emptied first) and namespaces; returns the groups that would not go."""
    empty(groups)
    left = [d for g in groups if g.dirs for d in g.remove()]
    for name in reversed(namespaces):  # deleting a namespace deletes its veth ends too
        sh("ip", "netns", "del", name, check=False)
    return left


def stale_groups() -> list[HostGroup]:
    """Hosts' groups found at the top of every mounted hierarchy, for `down` after a crash lost the state."""
    found: dict[str, HostGroup] = {}
    for m in mounts():
        for d in sorted((m.point / GROUPS).glob("gdl*")) if (m.point / GROUPS).is_dir() else []:
            for c in (m.controllers & {"cpu", "cpuacct", "memory"}) or {"cpu"}:
                found.setdefault(d.name, HostGroup(d.name)).dirs[c] = (d, m.version)
    return list(found.values())


def down() -> None:
    if STATE.exists():
        state = json.loads(STATE.read_text())
        unspin(state.get("spinners") or [])
        left = _remove(state["namespaces"], [g for g in host_groups(state) if g is not None])
        STATE.unlink()
    else:  # best effort after a crash
        left = _remove([SWITCH] + [f"gdl{k}" for k in range(MAX_HOSTS)], stale_groups())
    if left:
        raise SystemExit(f"netlab: could not remove {', '.join(map(str, left))}: processes still inside")
    print("netlab: down")


def run(cmd: list[str], port: int = 29400, timeout: float | None = None) -> int:
    """`launch`, and the worst of its exit codes."""
    return max(launch(cmd, port, timeout)[0], key=abs)


def launch(cmd: list[str], port: int = 29400, timeout: float | None = None) -> tuple[list[int], list[int]]:
    """Start one rank per host namespace (and, where hosts have them, in its cgroups) with torchrun-style
    variables; (each rank's exit code, the ranks whose host the kernel killed a process of for memory). Those
    are named on stderr too: `netlab: rank K lost (out of memory ...)`; 124: killed at `timeout`."""
    state = load_state()
    hosts, groups = state["hosts"], host_groups(state)
    own = state.get("groups") is not None and state.get("cores") is not None  # each host has cores of its own
    ooms = [g.usage()["oom_kills"] if g else 0 for g in groups]  # a host's count goes on across runs
    procs = []
    for k in range(hosts):
        env = dict(os.environ, RANK=str(k), WORLD_SIZE=str(hosts), LOCAL_RANK="0",
                   LOCAL_WORLD_SIZE="1" if own else str(hosts),  # without own cores all "hosts" share the box's
                   MASTER_ADDR=f"{SUBNET}.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME=f"gdl{k}h",
                   TORCH_CPP_LOG_LEVEL=os.environ.get("TORCH_CPP_LOG_LEVEL", "ERROR"))  # namespaces have no hostname entry
        join = (lambda g=groups[k]: g.join(os.getpid())) if groups[k] else None
        # nsenter, not `ip netns exec`, which mounts a fresh /sys and so hides the cgroups a rank reads its quota in
        try:
            procs.append(subprocess.Popen(["nsenter", f"--net=/run/netns/gdl{k}", "--", *cmd], env=env,
                                          preexec_fn=join))
        except (OSError, subprocess.SubprocessError) as e:  # a join the kernel refused, a command not found
            for q in procs:
                q.kill()
            empty(groups)
            raise SystemExit(f"netlab: cannot start rank {k} on host gdl{k}: {e}") from None
    deadline = None if timeout is None else time.monotonic() + timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            codes.append(124)
    codes = [128 - c if c < 0 else c for c in codes]  # killed by signal N: 128 + N, as a shell says
    empty(groups)  # what a rank left in its host's groups (its sentinel, about to go) would share the next run's quota
    lost = [k for k, g in enumerate(groups) if g is not None and g.usage()["oom_kills"] > ooms[k]]
    for k in lost:
        limit = f": host gdl{k}'s limit is {groups[k].memory / 2**20:.0f} MiB" if groups[k].memory else ""
        print(f"netlab: rank {k} lost (out of memory{limit})", file=sys.stderr)
    return codes, lost


def status() -> None:
    """Each host: its quota, memory limit, CPU time used, peak memory and OOM kills so far."""
    state = load_state()
    print(f"netlab: {state['hosts']} hosts, links {state['rate']}" + _host_line(state))
    print(f"{'host':<6} {'cores':>6} {'memory MiB':>10} {'cpu s':>9} {'peak MiB':>9} {'oom kills':>9} "
          f"{'throttled':>9} {'procs':>5}")
    for k, g in enumerate(host_groups(state)):
        if g is None:
            print(f"gdl{k:<3} {'-':>6} {'-':>10} (no cgroups: the hosts share the box)")
            continue
        u = g.usage()
        cpu = f"{u['cpu_s']:.2f}" if u["cpu_s"] is not None else "-"
        peak = f"{u['peak_bytes'] / 2**20:.0f}" if u["peak_bytes"] is not None else "-"
        cores = f"{g.cores:g}" if g.cores is not None else "-"
        mem = f"{g.memory / 2**20:.0f}" if g.memory is not None else "-"
        print(f"gdl{k:<3} {cores:>6} {mem:>10} {cpu:>9} {peak:>9} {u['oom_kills']:>9} {u['throttled']:>9} "
              f"{len(g.pids()):>5}")


def profile(out: str, port: int = 29400, name: str | None = None) -> int:
    """`gnn-dist profile-machine --link` as one rank per host: the lab's links as gloo's all-to-alls get through
    them, and the cores every rank shares (a host's quota where it has one); then the links' burst (tbf's
    bucket), which no sustained measurement shows, and their configured rate, which the bucket refills at.
    Run from the repository root."""
    lab = json.loads(STATE.read_text()) if STATE.exists() else {}
    name = name or f"lab-{lab.get('hosts')}x{lab.get('rate')}"
    code = run([sys.executable, "-m", "gnn_dist", "profile-machine", "--link", "--out", out, "--name", name], port)
    if code == 0 and lab.get("rate") != "none":
        import dataclasses

        from partition.machine import load, save

        save(dataclasses.replace(load(out), link_burst_bytes=float(BURST_BYTES),
                                 link_rate_bytes_per_s=rate_bytes_per_s(lab["rate"])), out)
    return code


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="create the hosts: namespaces, bridge, shaped links (and cgroups)")
    u.add_argument("--hosts", type=int, required=True)
    u.add_argument("--rate", default="1gbit", help="tc rate per link and direction (default 1gbit; none: unshaped)")
    u.add_argument("--delay", default=None, help="one-way delay, e.g. 1ms (needs netem)")
    u.add_argument("--cores-per-host", type=float, default=None, metavar="C",
                   help="a CPU quota of C cores per host (fractions allowed, e.g. 0.22); default: no quota, and "
                        "the hosts share the box's cores")
    u.add_argument("--memory-per-host", default=None, metavar="M",
                   help="a memory limit per host, e.g. 2G; a host over it is killed and named")
    u.add_argument("--keep-awake", action="store_true",
                   help="a SCHED_IDLE spinner on every CPU, so no vCPU halts while hosts wait out their quota "
                        "(a KVM guest's halted vCPU comes back slower)")
    u.add_argument("--cfs-period-us", type=int, default=None, metavar="US",
                   help="the quota's CFS period (default 10 ms, or longer where a 1 ms quota needs it; a period "
                        "under the scheduler tick runs a host below its quota)")
    r = sub.add_parser("run", help="run COMMAND as ranks 0..P-1, one per host")
    r.add_argument("--port", type=int, default=29400)
    r.add_argument("--timeout", type=float, default=None, help="kill every rank after this many seconds (exit 124)")
    r.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("status", help="each host's quota, memory limit, CPU time, peak memory and OOM kills so far")
    pr = sub.add_parser("profile", help="measure the lab's links (and cores) into a machine profile for the cost "
                                        "model: `gnn-dist profile-machine --link` run as one rank per host")
    pr.add_argument("--out", required=True, help="the JSON profile to write")
    sub.add_parser("down", help="remove everything `up` made")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("netlab: needs root (network namespaces, tc and cgroups)")
    if a.cmd == "up":
        memory = parse_bytes(a.memory_per_host) if a.memory_per_host is not None else None
        up(a.hosts, a.rate, a.delay, a.cores_per_host, memory, a.cfs_period_us, a.keep_awake)
    elif a.cmd == "down":
        down()
    elif a.cmd == "status":
        status()
    elif a.cmd == "profile":
        sys.exit(profile(a.out))
    else:
        cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
        if not cmd:
            raise SystemExit("netlab: run needs a command: netlab.py run -- COMMAND ...")
        sys.exit(run(cmd, a.port, a.timeout))


if __name__ == "__main__":
    main()
