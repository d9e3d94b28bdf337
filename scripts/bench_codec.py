"""Codec throughput against a plain memory copy of the same tensor, one thread.

    python scripts/bench_codec.py [--rows 100000] [--width 128] [--device cpu|cuda]

Bandwidth, for the copy and the codecs alike, is bytes read plus bytes written over the time taken: a
copy of n fp32 bytes moves 2n; encode reads the n fp32 bytes and writes the wire records; decode reads
the wire records and writes n fp32 bytes. "x copy" is that bandwidth over the copy's, so a codec at 1.00
moves its bytes as fast as a copy does. Encoding and decoding are measured as the exchange does them
(wire records into an existing buffer), with the torch expressions and with the fused kernels side by
side: numba on the CPU, Triton on CUDA. A second table times keyed input dropout (the kernel, and torch's
ops) against torch's F.dropout on the same tensor. Each row is printed as soon as it is measured; the
last lines check issue 31's goals (on CUDA; on the CPU the same lines are for information): the fused
intB encode and decode >= 0.5x copy, keyed dropout <= 2x F.dropout.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gnn_dist.nn import dropout  # noqa: E402
from gnn_dist.runtime import codec, kernels, tuning  # noqa: E402

SYNC = [lambda: None]  # torch.cuda.synchronize on a GPU: time the kernels, not their launch
BATCH = [1]  # calls per timed batch: 20 on a GPU, where one call takes well under a millisecond
CODEC_GOAL, DROPOUT_GOAL = 0.5, 2.0  # issue 31: intB codecs >= 0.5x copy; keyed dropout <= 2x F.dropout


def seconds(fn, repeat: int = 5) -> float:
    """Best time of one call, over `repeat` batches of BATCH calls (after a warm-up call: compiles, allocations)."""
    fn()
    SYNC[0]()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(BATCH[0]):
            fn()
        SYNC[0]()
        best = min(best, (time.perf_counter() - t) / BATCH[0])
    return best


def rate(fn, nbytes: int, repeat: int = 5) -> float:
    """GB/s of `fn`, which reads and writes `nbytes` in all."""
    return nbytes / seconds(fn, repeat) / 1e9


def verdict(ok: bool) -> str:
    return "met" if ok else "missed"


def dropout_table(x: torch.Tensor) -> float | None:
    """Keyed input dropout (the device's kernel, and torch's ops) against F.dropout on the same tensor, p = 0.5;
    returns the kernel's time over F.dropout's (None where no kernel is installed)."""
    ids = torch.arange(x.shape[0], device=x.device)
    base = seconds(lambda: torch.nn.functional.dropout(x, 0.5, True))
    print("\n| dropout, p = 0.5 | ms | x F.dropout |\n|---|---|---|")
    print(f"| torch F.dropout | {base * 1e3:.3f} | 1.00 |", flush=True)
    kernel = ("keyed, Triton kernel", kernels.triton_available()) if x.is_cuda else \
        ("keyed, numba kernel", kernels.available())
    ratio = None
    for label, backend in ((kernel[0], "auto"), ("keyed, torch ops", "torch")):
        if backend == "auto" and not kernel[1]:
            continue
        tuning.ENV.dropout_backend = backend
        t = seconds(lambda: dropout.keyed_dropout(x, ids, 0.5, key=12345))
        print(f"| {label} | {t * 1e3:.3f} | {t / base:.2f} |", flush=True)
        ratio = t / base if backend == "auto" else ratio
    tuning.ENV.dropout_backend = "auto"
    return ratio


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
        SYNC[0], BATCH[0] = torch.cuda.synchronize, 20
    x = torch.randn(a.rows, a.width, device=dev)
    n = x.numel() * 4  # fp32 bytes of the tensor
    fused = kernels.available() if a.device == "cpu" else kernels.triton_available()
    backends = ["torch"] + (["fused" if a.device == "cpu" else "triton"] if fused else [])
    print(f"{a.rows} x {a.width} fp32 ({n / 1e6:.0f} MB), {a.device}, {a.threads} thread(s); GB/s = (bytes read "
          f"+ bytes written) / s")
    print("| operation | " + " | ".join(f"{b} GB/s | x copy" for b in backends) + " | wire bytes |")
    print("|---|" + "---|---|" * len(backends) + "---|", flush=True)
    copy = rate(lambda: x.clone(), 2 * n)  # reads n, writes n
    print("| memory copy (fresh tensor) | " + " | ".join(f"{copy:.2f} | 1.00" for _ in backends) + f" | {n} |", flush=True)
    naive = rate(lambda: torch.floor((x - x.min(1, keepdim=True)[0]) /
                                     ((x.max(1, keepdim=True)[0] - x.min(1, keepdim=True)[0]) / 255)
                                     + torch.rand_like(x)).to(torch.uint8), n + x.numel())  # fp32 in, uint8 out
    print(f"| naive torch int8 expression | {naive:.2f} | {naive / copy:.2f} |" + " | |" * (len(backends) - 1) + " |",
          flush=True)
    worst = (float("inf"), "-")  # the goal's figure: the fused backend's lowest intB x copy
    for name in codec.CODECS:
        wire = codec.wire_bytes(a.rows, a.width, name)
        buf = torch.empty(wire, dtype=torch.uint8, device=dev)
        res = torch.empty(a.rows, a.width, device=dev)
        enc, dec = [], []
        for b in backends:
            tuning.ENV.codec_backend = "auto" if b == "triton" else b
            codec.encode_rows(x, name, out=buf)
            enc.append(rate(lambda: codec.encode_rows(x, name, out=buf), n + wire))
            dec.append(rate(lambda: codec.decode_rows(buf, name, a.width, out=res), wire + n))
        print(f"| encode {name} | " + " | ".join(f"{e:.2f} | {e / copy:.2f}" for e in enc) + f" | {wire} |", flush=True)
        print(f"| decode {name} | " + " | ".join(f"{d:.2f} | {d / copy:.2f}" for d in dec) + " | |", flush=True)
        if name.startswith("int"):
            worst = min(worst, (enc[-1] / copy, f"encode {name}"), (dec[-1] / copy, f"decode {name}"))
    tuning.ENV.codec_backend = "auto"
    keyed = dropout_table(x)
    print(f"goal: intB encode and decode >= {CODEC_GOAL}x copy ({a.device}, {backends[-1]}): measured {worst[0]:.2f}x "
          f"at the lowest ({worst[1]}), {verdict(worst[0] >= CODEC_GOAL)}")
    if keyed is None:
        print(f"goal: keyed dropout <= {DROPOUT_GOAL}x F.dropout ({a.device}): not measured, no kernel installed")
    else:
        print(f"goal: keyed dropout <= {DROPOUT_GOAL}x F.dropout ({a.device}, kernel): measured {keyed:.2f}x, "
              f"{verdict(keyed <= DROPOUT_GOAL)}", flush=True)


if __name__ == "__main__":
    main()
