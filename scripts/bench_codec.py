"""Codec throughput against a plain memory copy of the same tensor, one thread.

    python scripts/bench_codec.py [--rows 100000] [--width 128]

GB/s counts fp32 input bytes; encode must be fast enough not to eat the
bandwidth it saves (goal: int8 encode >= 1 GB/s per core).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gnn_dist import codec  # noqa: E402


def rate(fn, nbytes: int, repeat: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return nbytes / best / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    x = torch.randn(a.rows, a.width)
    n = x.numel() * 4
    copy = rate(lambda: x.clone(), n)
    naive = rate(lambda: torch.floor((x - x.min(1, keepdim=True)[0]) /
                                     ((x.max(1, keepdim=True)[0] - x.min(1, keepdim=True)[0]) / 255)
                                     + torch.rand_like(x)).to(torch.uint8), n)
    print(f"{a.rows} x {a.width} fp32 ({n / 1e6:.0f} MB), {a.threads} thread(s)")
    print(f"{'operation':<16} {'GB/s':>7} {'x copy':>7} {'wire bytes':>11}")
    print(f"{'memory copy':<16} {copy:>7.2f} {1:>7.2f} {n:>11}")
    print(f"{'naive int8':<16} {naive:>7.2f} {naive / copy:>7.2f} {'':>11}")
    for name in codec.CODECS:
        enc = codec.encode(x, name)
        e = rate(lambda: codec.encode(x, name), n)
        d = rate(lambda: codec.decode(enc), n)
        print(f"{'encode ' + name:<16} {e:>7.2f} {e / copy:>7.2f} {enc.nbytes():>11}")
        print(f"{'decode ' + name:<16} {d:>7.2f} {d / copy:>7.2f} {'':>11}")


if __name__ == "__main__":
    main()
