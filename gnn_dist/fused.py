"""Reaching the numba kernels (`gnn_dist.cpu_kernels`) without importing numba before one is needed."""
from __future__ import annotations

import importlib.util


def available() -> bool:
    """numba is installed (the kernels themselves load, and compile or come from disk, on first use: ~1.5 s)."""
    return importlib.util.find_spec("numba") is not None


def kernels():
    from gnn_dist import cpu_kernels

    return cpu_kernels
