"""Network lab: P network namespaces on one box, joined by rate-limited veth links to a bridge.

    sudo python scripts/netlab.py up --hosts 4 --rate 1gbit [--delay 1ms]
    sudo python scripts/netlab.py run -- python -m gnn_dist train --partition out/g-4 ...
    sudo python scripts/netlab.py profile --out lab.json   # the cost model's profile of the lab's links
    sudo python scripts/netlab.py down

Each host namespace `gdlK` has one veth (`gdlKh`, address 10.77.0.K+1/24)
whose peer (`gdlKs`) sits on bridge `gdlbr` in the switch namespace `gdlsw`.
Both directions of every link go through `tc tbf` at --rate, so bytes on the
wire cost real time. `run` starts rank K in namespace gdlK with torchrun's
variables (MASTER_ADDR = host 0), so gnn-dist's launcher rendezvouses over
the lab links and gloo binds to the veth. Only these addresses are used, and
`down` removes everything `up` made.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

STATE = Path("/run/gnn-dist-netlab.json")
SUBNET = "10.77.0"
SWITCH = "gdlsw"
BRIDGE = "gdlbr"
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


def up(hosts: int, rate: str, delay: str | None) -> None:
    if STATE.exists():
        raise SystemExit(f"netlab: a lab is already up ({STATE}); run `down` first")
    made = {"hosts": hosts, "rate": rate, "delay": delay, "namespaces": []}
    try:
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
            shape(host, h, rate, delay)  # host -> switch
            shape(SWITCH, s, rate, delay)  # switch -> host
    except BaseException:
        _remove(made["namespaces"])
        raise
    STATE.write_text(json.dumps(made))
    print(f"netlab: {hosts} hosts {SUBNET}.1-{hosts} at {rate}" + (f", delay {delay}" if delay else ""))


def _remove(namespaces: list[str]) -> None:
    for name in reversed(namespaces):  # deleting a namespace deletes its veth ends too
        sh("ip", "netns", "del", name, check=False)


def down() -> None:
    if STATE.exists():
        _remove(json.loads(STATE.read_text())["namespaces"])
        STATE.unlink()
    else:  # best effort after a crash
        _remove([SWITCH] + [f"gdl{k}" for k in range(64)])
    print("netlab: down")


def run(cmd: list[str], port: int = 29400, timeout: float | None = None) -> int:
    """Start one rank per host namespace with torchrun-style variables; return the worst exit code."""
    if not STATE.exists():
        raise SystemExit("netlab: no lab is up (run `up` first)")
    hosts = json.loads(STATE.read_text())["hosts"]
    procs = []
    for k in range(hosts):
        env = dict(os.environ, RANK=str(k), WORLD_SIZE=str(hosts), LOCAL_RANK="0",
                   LOCAL_WORLD_SIZE=str(hosts),  # all "hosts" share this box's cores
                   MASTER_ADDR=f"{SUBNET}.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME=f"gdl{k}h",
                   TORCH_CPP_LOG_LEVEL=os.environ.get("TORCH_CPP_LOG_LEVEL", "ERROR"))  # namespaces have no hostname entry
        procs.append(subprocess.Popen(["ip", "netns", "exec", f"gdl{k}", *cmd], env=env))
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            codes.append(124)
    return max(codes, key=abs)


def profile(out: str, port: int = 29400, name: str | None = None) -> int:
    """`gnn-dist profile-machine --link` as one rank per host: the lab's links as gloo's all-to-alls get through
    them, and the cores every rank shares; then the links' burst (tbf's bucket), which no sustained
    measurement shows. Run from the repository root."""
    lab = json.loads(STATE.read_text()) if STATE.exists() else {}
    name = name or f"lab-{lab.get('hosts')}x{lab.get('rate')}"
    code = run([sys.executable, "-m", "gnn_dist", "profile-machine", "--link", "--out", out, "--name", name], port)
    if code == 0:
        import dataclasses

        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from partition.machine import load, save

        save(dataclasses.replace(load(out), link_burst_bytes=float(BURST_BYTES)), out)
    return code


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="create the namespaces, bridge and shaped links")
    u.add_argument("--hosts", type=int, required=True)
    u.add_argument("--rate", default="1gbit", help="tc rate per link and direction (default 1gbit)")
    u.add_argument("--delay", default=None, help="one-way delay, e.g. 1ms (needs netem)")
    r = sub.add_parser("run", help="run COMMAND as ranks 0..P-1, one per host namespace")
    r.add_argument("--port", type=int, default=29400)
    r.add_argument("command", nargs=argparse.REMAINDER)
    pr = sub.add_parser("profile", help="measure the lab's links (and cores) into a machine profile for the cost "
                                        "model: `gnn-dist profile-machine --link` run as one rank per host")
    pr.add_argument("--out", required=True, help="the JSON profile to write")
    sub.add_parser("down", help="remove everything `up` made")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("netlab: needs root (network namespaces and tc)")
    if a.cmd == "up":
        up(a.hosts, a.rate, a.delay)
    elif a.cmd == "down":
        down()
    elif a.cmd == "profile":
        sys.exit(profile(a.out))
    else:
        cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
        sys.exit(run(cmd, a.port))


if __name__ == "__main__":
    main()
