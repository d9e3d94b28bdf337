"""Reaching the numba kernels (`gnn_dist.runtime.numba_kernels`) without importing numba before one is needed,
and running a kernel over ranges of its elements on torch's threads (the kernels release the GIL); reaching the
Triton kernels for CUDA tensors (`gnn_dist.runtime.triton_kernels`, the `kernels` extra) likewise."""
from __future__ import annotations

import functools
import importlib.util
import re
import sys
from concurrent.futures import ThreadPoolExecutor

import torch

from gnn_dist.runtime import tuning
from gnn_dist.runtime.malloc import resident_bytes

_POOL: list = [None, 0]  # the executor and its size
# The `kernels` extra's triton (pyproject), the oldest the Triton kernels are tested with. Older ones stay unused:
# torch 2.2 brings triton 2.2, whose language lacks what the kernels use; CUDA tensors then take torch's path,
# which writes the same bits.
TRITON_MIN = (3, 6)


def available() -> bool:
    """numba is installed (the kernels themselves load, and compile or come from disk, on first use: ~1.5 s)."""
    return importlib.util.find_spec("numba") is not None


_NUMBA_RSS = [0, 0, 0]  # resident bytes numba added (import, compiles); open compiles; resident at the outermost start


def load():
    """The numba kernels module, imported (and its kernels compiled or read from numba's cache) on first call."""
    first = "gnn_dist.runtime.numba_kernels" not in sys.modules
    before = resident_bytes() if first else 0
    from gnn_dist.runtime import numba_kernels

    if first:
        from numba.core import event

        event.register("numba:compiler_lock", _compile_meter(event.Listener)())
        _NUMBA_RSS[0] += resident_bytes() - before

    return numba_kernels


def numba_bytes() -> int:
    """Resident memory numba brought into this process: what importing it and each compile (or read of a
    compiled kernel from numba's cache) added to RSS, LLVM and llvmlite's code pages included; 0 before
    `load`. The memory report's "numba kernels" row: measured as each happens, since nothing in the
    process can tell numba's allocations apart later."""
    return _NUMBA_RSS[0]


def _compile_meter(listener: type) -> type:
    """A numba event listener (class) that adds the RSS growth over each outermost hold of numba's compiler
    lock to `numba_bytes` (every compile and cache load takes the lock; nested holds count once)."""

    class CompileMeter(listener):
        def on_start(self, event) -> None:
            _NUMBA_RSS[1] += 1
            if _NUMBA_RSS[1] == 1:
                _NUMBA_RSS[2] = resident_bytes()

        def on_end(self, event) -> None:
            _NUMBA_RSS[1] = max(0, _NUMBA_RSS[1] - 1)
            if _NUMBA_RSS[1] == 0:
                _NUMBA_RSS[0] += max(0, resident_bytes() - _NUMBA_RSS[2])

    return CompileMeter


@functools.cache
def triton_available() -> bool:
    """triton TRITON_MIN or newer can be imported (its kernels compile for the device on their first launch, a
    second or two each).

    The version comes from the module, not from package metadata: torch's wheels bring Triton as the
    distribution `pytorch-triton` (or `pytorch-triton-rocm`), which has no `triton` metadata to read.
    Asked only for CUDA tensors, so importing triton here costs a CPU-only process nothing.
    """
    if importlib.util.find_spec("triton") is None:
        return False
    try:
        import triton
    except Exception:  # a broken install (e.g. no driver libraries it needs): CUDA tensors take torch's path
        return False
    return tuple(int(p) for p in re.findall(r"\d+", getattr(triton, "__version__", "0"))[:2]) >= TRITON_MIN


def triton():
    """The Triton kernels module, imported on first call (callers ask only for CUDA tensors)."""
    from gnn_dist.runtime import triton_kernels

    return triton_kernels


def in_ranges(kernel, n: int, *args) -> None:
    """kernel(lo, hi, *args) over [0, n), split into torch.get_num_threads() ranges run on a thread pool
    (small jobs stay on the calling thread)."""
    parts = max(1, min(torch.get_num_threads(), n // tuning.THREAD_MIN_ELEMENTS))
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
