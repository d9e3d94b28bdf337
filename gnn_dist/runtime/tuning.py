"""Every tuning threshold of the runtime, once, with its unit in its name; and the environment overrides.

A threshold is a choice that measurement made (why each value is what it is stays beside it); a fact of
a library or the hardware (glibc's mallopt codes, a huge page's size) stays in the module that uses it.

The environment overrides (`GNN_DIST_CODEC`, `GNN_DIST_DROPOUT`, `GNN_DIST_MPI_MAX_ROWS`,
`GNN_DIST_HOST_CORES`, `GNN_DIST_GLOO_DUPLEX`) are read once, by `read_environment()`: `gnn_dist.init` calls it before anything
else, and a process that never calls `init` may call it itself. Until then every override holds its
default. `GNN_DIST_MALLOC` is apart: the allocator must be set before torch is imported
(`gnn_dist.runtime.malloc`), so it is read there, at process start.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields

from gnn_dist.errors import LaunchError

# ------------------------------------------------------------------ CPU kernels (numba)
# Below this many elements (rows x columns of an elementwise kernel: dropout, its mask), callers run torch's
# form: importing numba and loading its kernels costs a process about 100 MB and a second, more than small
# tensors ever gain (a 32k-element dropout: 0.8 ms in torch).
NUMBA_MIN_ELEMENTS = 1 << 16
# The same trade for a sparse product, counted in multiply-adds (stored entries x columns of the dense side).
NUMBA_MIN_SPMM_MULTIPLY_ADDS = 1 << 16
# Below this many elements per thread, one kernel call is cheaper than handing out row ranges.
THREAD_MIN_ELEMENTS = 1 << 15
# Row width under which the fused intB encoder takes its row ranges itself (narrow rows: too little per call).
RANGES_IN_KERNEL_BELOW_COLUMNS = 32

# ------------------------------------------------------------------ stochastic rounding
# Dither values drawn per block by the numba and Triton encoders (the same table, so the same bits); larger
# blocks read it at hashed row offsets.
DITHER_TABLE_VALUES = 1 << 16
# The torch encoder's pool of uniform values; a block reads a window of half of it at a key-chosen offset.
DITHER_POOL_VALUES = 1 << 23

# ------------------------------------------------------------------ adaptive bit-widths
ADAPTIVE_START_BITS = 8  # before the first solve: int8 on every link
LINK_PROBE_BYTES = (64, 1 << 20, 1 << 22)  # message sizes the link model (alpha x bytes + beta) is fitted to
LINK_PROBE_REPEATS = 5  # rounds per size; the best is kept

# ------------------------------------------------------------------ memory (glibc malloc, huge pages)
MALLOC_TRIM_THRESHOLD_BYTES = 1 << 30  # free memory glibc keeps before returning any to the kernel
HUGE_PAGES_MIN_BYTES = 96 << 20  # activations per rank from which huge pages pay: faster at 128 MB, slower at 51 MB

# ------------------------------------------------------------------ snapshots
SNAPSHOT_GROUP_ROWS = 1 << 16  # automatic group size: snapshots per group such that a group holds about this many

# ------------------------------------------------------------------ transport
# A pair of ranks whose larger direction carries at least this many bytes in one all-to-all sends each
# direction on a connection of its own (`transport.use_duplex`, across hosts): gloo carried both directions
# of one connection at half the rate, which a large block pays in seconds; a small one is latency-bound,
# and a wait on two groups' threads met 3-4 ms stalls (scripts/gloo_duplex.py --loopback --mb 0.05: in every
# kind of transfer, but the one-connection path wakes fewer threads). 1 MiB takes 8 ms at 1 Gbit/s.
DUPLEX_MIN_PAIR_BYTES = 1 << 20
# Plans with at most this many rows per all-to-all on every rank travel over MPI (`transport.agree_small`).
MPI_MAX_ROWS_DEFAULT = 16384

BACKENDS = {"codec": ("auto", "torch", "fused"), "dropout": ("auto", "torch")}


@dataclass
class Environment:
    """The overrides in force (defaults until `read_environment`)."""

    codec_backend: str = "auto"  # GNN_DIST_CODEC: auto | torch | fused (fused: numba, or an error without it)
    dropout_backend: str = "auto"  # GNN_DIST_DROPOUT: auto | torch (torch's F.dropout, not the hashed masks)
    mpi_max_rows: int = MPI_MAX_ROWS_DEFAULT  # GNN_DIST_MPI_MAX_ROWS: for measuring the transports
    host_cores: float | None = None  # GNN_DIST_HOST_CORES: cores per host for the transport rule (tests); None: measured
    gloo_duplex: bool = True  # GNN_DIST_GLOO_DUPLEX=0: gloo's own all-to-all (one connection a pair) instead


ENV = Environment()  # changed in place: modules hold this object, never a copy of a field


def read_environment(environ: dict | None = None) -> Environment:
    """Set `ENV` from the process environment (or `environ`); a bad value is one line naming the variable."""
    environ = os.environ if environ is None else environ
    read = Environment()
    for name, kind in (("codec", "GNN_DIST_CODEC"), ("dropout", "GNN_DIST_DROPOUT")):
        value = (environ.get(kind) or "").strip() or "auto"
        if value not in BACKENDS[name]:
            raise LaunchError(f"{kind}={value[:40]!r}: choose one of {', '.join(BACKENDS[name])}")
        setattr(read, f"{name}_backend", value)
    read.mpi_max_rows = int(_number(environ, "GNN_DIST_MPI_MAX_ROWS", MPI_MAX_ROWS_DEFAULT, whole=True, zero=True))
    cores = _number(environ, "GNN_DIST_HOST_CORES", None, whole=False)
    duplex = (environ.get("GNN_DIST_GLOO_DUPLEX") or "").strip() or "1"
    if duplex not in ("0", "1"):
        raise LaunchError(f"GNN_DIST_GLOO_DUPLEX={duplex[:40]!r}: 1 (a connection per direction) or 0")
    read.gloo_duplex = duplex == "1"
    read.host_cores = None if cores is None else float(cores)
    for f in fields(Environment):
        setattr(ENV, f.name, getattr(read, f.name))
    return ENV


def _number(environ, name: str, default, whole: bool, zero: bool = False):
    text = (environ.get(name) or "").strip()
    if not text:
        return default
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        value = None
    if value is None or not (value >= 0 if zero else value > 0) or value == float("inf"):
        kind = f"{'a whole' if whole else 'a'} number{' >= 0' if zero else ' > 0'}"
        raise LaunchError(f"{name}={text[:40]!r}: {kind}, or unset")
    return value
