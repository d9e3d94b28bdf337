"""Does a link carry both directions at once? gloo's all-to-all against one-way sends, on the lab's links.

    sudo python scripts/gloo_duplex.py [--rate 100mbit] [--mb 13.5] [--repeat 6]
    python scripts/gloo_duplex.py --loopback [--mb 0.05]     # two ranks on this box, no lab, no root

Brings up a 2-host lab (`netlab.py up --hosts 2 --rate R`, no CPU quota), then times, on those two ranks:
`all_to_all_single` of M MB each way (what a halo exchange does), `isend`/`irecv` of the same (both ways at
once, no collective), the same with each direction in a process group of its own (what
`gnn_dist.runtime.transport` does across hosts), and a one-way `send` of M MB. At line rate a both-ways
transfer takes the one-way time: each direction has its own shaped queue. Prints each call's seconds and
the median per kind, then takes the lab down. `--loopback` runs the same two ranks on this box instead
(times in ms: there gloo's own all-to-all is the faster, which is why one host keeps it). Why it exists:
the cluster sweep's 200 Mbit/s rows missed their bound by more than the wire explains (docs/benchmarks.md,
"A cluster in a box").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KINDS = ("all_to_all", "isend/irecv", "a group per direction", "one way")


def rank_main(mb: float, repeat: int, out: str) -> None:
    """One rank of the probe (run by `netlab.launch`): every kind `repeat` times, interleaved."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), int(mb * 1e6 / 4)
    x, got = torch.ones(2 * n), torch.empty(2 * n)
    peer, times = 1 - rank, {k: [] for k in KINDS}
    up, down = dist.new_group([0, 1]), dist.new_group([0, 1])  # connections of their own: 0 -> 1 and 1 -> 0
    for _ in range(repeat):
        for kind in KINDS:
            dist.barrier()
            t = time.perf_counter()
            if kind == "all_to_all":
                dist.all_to_all_single(got, x)  # n rows to itself, n to the peer
            elif kind == "isend/irecv":
                for req in (dist.isend(x[:n], peer), dist.irecv(got[:n], peer)):
                    req.wait()
            elif kind == "a group per direction":
                mine, theirs = (up, down) if rank == 0 else (down, up)
                for req in (dist.isend(x[:n], peer, group=mine), dist.irecv(got[:n], peer, group=theirs)):
                    req.wait()
            elif rank == 0:
                dist.send(x[:n], 1)
            else:
                dist.recv(got[:n], 0)
            dist.barrier()
            times[kind].append(time.perf_counter() - t)
    if rank == 0:
        Path(out).write_text(json.dumps(times))
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", default="100mbit")
    ap.add_argument("--mb", type=float, default=13.5, help="MB each way per call (a 3-layer SBM-150k exchange)")
    ap.add_argument("--repeat", type=int, default=6)
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--loopback", action="store_true", help="two ranks on this box (no lab, no root)")
    a = ap.parse_args()
    if a.rank:
        return rank_main(a.mb, a.repeat, a.out)
    sys.path.insert(0, str(HERE))
    import netlab

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "times.json"
        probe = [sys.executable, __file__, "--rank", "--mb", str(a.mb), "--repeat", str(a.repeat), "--out", str(out)]
        codes = loopback(probe) if a.loopback else on_the_lab(probe, a.rate, netlab)
        if any(codes) or not out.exists():
            raise SystemExit(f"gloo_duplex: the probe's ranks exited with {codes}")
        times = json.loads(out.read_text())
    unit, scale = ("ms", 1e3) if a.loopback else ("s", 1.0)
    where = "over loopback" if a.loopback else \
        f"at {a.rate} (line rate: {a.mb * 1e6 / netlab.rate_bytes_per_s(a.rate):.2f} s one way)"
    print(f"{a.mb:g} MB each way {where}")
    print(f"| transfer | median {unit} | x one way | every call, {unit} |\n|---|---|---|---|")
    one = statistics.median(times["one way"])
    for kind in KINDS:
        med = statistics.median(times[kind])
        print(f"| {kind} | {med * scale:.2f} | {med / one:.2f} | {', '.join(f'{t * scale:.2f}' for t in times[kind])} |")


def on_the_lab(probe: list[str], rate: str, netlab) -> list[int]:
    lab = [sys.executable, str(HERE / "netlab.py")]
    subprocess.run([*lab, "up", "--hosts", "2", "--rate", rate], check=True)
    try:
        return netlab.launch(probe, timeout=600)[0]
    finally:
        subprocess.run([*lab, "down"], check=False)


def loopback(probe: list[str]) -> list[int]:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT="29431", WORLD_SIZE="2", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen(probe, env=dict(env, RANK=str(r))) for r in range(2)]
    return [p.wait(timeout=600) for p in procs]


if __name__ == "__main__":
    main()
