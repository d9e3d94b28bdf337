"""Codec throughput against a plain memory copy of the same tensor, one thread.

    python scripts/bench_codec.py [--rows 100000] [--width 128] [--device cpu|cuda]

GB/s counts fp32 input bytes; encode must be fast enough not to eat the
bandwidth it saves (goal: int8 encode >= 1 GB/s per core). Encoding and
decoding are measured as the exchange does them (wire records into an
existing buffer), with the torch expressions and with the fused numba
kernels side by side.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gnn_dist.runtime import codec, kernels  # noqa: E402

SYNC = [lambda: None]  # torch.cuda.synchronize on a GPU: time the kernels, not their launch


def rate(fn, nbytes: int, repeat: int = 5) -> float:
    fn()
    SYNC[0]()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        SYNC[0]()
        best = min(best, time.perf_counter() - t)
    return nbytes / best / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    if a.device == "cuda":
        SYNC[0] = torch.cuda.synchronize
    x = torch.randn(a.rows, a.width, device=dev)
    n = x.numel() * 4
    copy = rate(lambda: x.clone(), n)
    naive = rate(lambda: torch.floor((x - x.min(1, keepdim=True)[0]) /
                                     ((x.max(1, keepdim=True)[0] - x.min(1, keepdim=True)[0]) / 255)
                                     + torch.rand_like(x)).to(torch.uint8), n)
    print(f"{a.rows} x {a.width} fp32 ({n / 1e6:.0f} MB), {a.device}, {a.threads} thread(s)")
    backends = ["torch"] + (["fused"] if kernels.available() and a.device == "cpu" else [])
    print("| operation | " + " | ".join(f"{b} GB/s | x copy" for b in backends) + " | wire bytes |")
    print("|---|" + "---|---|" * len(backends) + "---|")
    print("| memory copy (fresh tensor) | " + " | ".join(f"{copy:.2f} | 1.00" for _ in backends) + f" | {n} |")
    print(f"| naive torch int8 expression | {naive:.2f} | {naive / copy:.2f} |" + " | |" * (len(backends) - 1) + " |")
    for name in codec.CODECS:
        wire = codec.wire_bytes(a.rows, a.width, name)
        buf = torch.empty(wire, dtype=torch.uint8, device=dev)
        res = torch.empty(a.rows, a.width, device=dev)
        enc, dec = [], []
        for b in backends:
            codec.BACKEND = b
            codec.encode_rows(x, name, out=buf)
            enc.append(rate(lambda: codec.encode_rows(x, name, out=buf), n))
            dec.append(rate(lambda: codec.decode_rows(buf, name, a.width, out=res), n))
        print(f"| encode {name} | " + " | ".join(f"{e:.2f} | {e / copy:.2f}" for e in enc) + f" | {wire} |")
        print(f"| decode {name} | " + " | ".join(f"{d:.2f} | {d / copy:.2f}" for d in dec) + " | |")

if __name__ == "__main__":
    main()
