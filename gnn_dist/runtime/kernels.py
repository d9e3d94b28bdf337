"""Reaching the numba kernels (`gnn_dist.runtime.numba_kernels`) without importing numba before one is needed."""
from __future__ import annotations

import importlib.util


def available() -> bool:
    """numba is installed (the kernels themselves load, and compile or come from disk, on first use: ~1.5 s)."""
    return importlib.util.find_spec("numba") is not None


def load():
    """The numba kernels module, imported (and its kernels compiled or read from numba's cache) on first call."""
    from gnn_dist.runtime import numba_kernels

    return numba_kernels
