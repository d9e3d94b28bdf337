"""Reaching the numba kernels (`gnn_dist.runtime.numba_kernels`) without importing numba before one is needed,
and running a kernel over ranges of its elements on torch's threads (the kernels release the GIL); reaching the
Triton kernels for CUDA tensors (`gnn_dist.runtime.triton_kernels`, the `kernels` extra) likewise."""
from __future__ import annotations

import functools
import importlib.util
import re
from concurrent.futures import ThreadPoolExecutor

import torch

MIN_CHUNK = 1 << 15  # below this many items per thread, one call is cheaper than handing out ranges
# Below this many items, callers run torch's form of a kernel: importing numba and loading its kernels costs a
# process about 100 MB and a second, more than small tensors ever gain (a 32k-item dropout: 0.8 ms in torch).
NUMBA_MIN_ITEMS = 1 << 16
_POOL: list = [None, 0]  # the executor and its size
# The `kernels` extra's triton (pyproject), the oldest the Triton kernels are tested with. Older ones stay unused:
# torch 2.2 brings triton 2.2, whose language lacks what the kernels use; CUDA tensors then take torch's path,
# which writes the same bits.
TRITON_MIN = (3, 6)


def available() -> bool:
    """numba is installed (the kernels themselves load, and compile or come from disk, on first use: ~1.5 s)."""
    return importlib.util.find_spec("numba") is not None


def load():
    """The numba kernels module, imported (and its kernels compiled or read from numba's cache) on first call."""
    from gnn_dist.runtime import numba_kernels

    return numba_kernels


@functools.cache
def triton_available() -> bool:
    """triton TRITON_MIN or newer is installed (its kernels compile for the device on their first launch, a
    second or two each)."""
    if importlib.util.find_spec("triton") is None:
        return False
    from importlib.metadata import version

    return tuple(int(p) for p in re.findall(r"\d+", version("triton"))[:2]) >= TRITON_MIN


def triton():
    """The Triton kernels module, imported on first call (callers ask only for CUDA tensors)."""
    from gnn_dist.runtime import triton_kernels

    return triton_kernels


def in_ranges(kernel, n: int, *args) -> None:
    """kernel(lo, hi, *args) over [0, n), split into torch.get_num_threads() ranges run on a thread pool
    (small jobs stay on the calling thread)."""
    parts = max(1, min(torch.get_num_threads(), n // MIN_CHUNK))
    if parts == 1:
        kernel(0, n, *args)
        return
    if _POOL[1] != parts:
        if _POOL[0] is not None:
            _POOL[0].shutdown()
        _POOL[0], _POOL[1] = ThreadPoolExecutor(parts, thread_name_prefix="gnn-dist-kernel"), parts
    bounds = [n * i // parts for i in range(parts + 1)]
    for f in [_POOL[0].submit(kernel, lo, hi, *args) for lo, hi in zip(bounds[:-1], bounds[1:])]:
        f.result()
