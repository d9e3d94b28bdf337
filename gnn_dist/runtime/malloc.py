"""Keep freed tensor memory in the process instead of handing it back to the kernel (glibc only).

A training step allocates and frees the same large CPU tensors every epoch
(halo blocks, aggregation outputs, receive buffers: megabytes each). glibc
serves blocks of that size with fresh mmap()s or trims them off the heap on
free, so every epoch pays the kernel to fault in and zero those pages again:
a fresh 18 MB tensor filled once costs about 8 ms on average here, a reused
one 0.4 ms. Raising the mmap threshold to its maximum and the trim threshold
well above it keeps those blocks on the heap for reuse, what jemalloc or
tcmalloc do by default. The price is that peak heap memory is not returned
until the process exits. GNN_DIST_MALLOC=system leaves glibc's defaults.

Blocks above glibc's 32 MB ceiling (a 1M x 128 activation is 512 MB) are
still mmap()ed afresh each time, and faulting them in 4 KB pages costs more
than the work that fills them (a bias add into a fresh 512 MB tensor: 168 ms,
into an existing one: 30 ms). torch backs its large CPU tensors with 2 MB
transparent huge pages when THP_MEM_ALLOC_ENABLE=1 is set before its first
allocation (43 ms for that add). That pays only for large tensors: on a 1M-node
graph (128 MB activations per rank at P=4) epochs ran 20-30% faster, on a
100k-node graph (51 MB at P=1, 13-25 MB at P=2 and 4) 25-60% slower. So
`gnn-dist train` sets it, before it imports torch, only where a rank's
activations reach HUGE_PAGES_MIN_BYTES (docs/training.md: setting it for a script).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys

from gnn_dist.runtime import tuning

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 << 20  # glibc's ceiling on 64-bit: larger requests are still mmap()ed
HUGE_PAGE = 2 << 20  # with torch's huge pages, tensors from this size are mapped afresh (keep_freed_memory)
KERNEL_HUGE_PAGES = "/sys/kernel/mm/transparent_hugepage/enabled"  # "always [madvise] never": the mode in brackets


def prefer_huge_pages(activation_bytes: int) -> bool:
    """Ask torch for transparent huge pages under its large CPU tensors when a rank's activations
    (rows x width x 4 B) reach HUGE_PAGES_MIN_BYTES. Only takes effect before torch is imported, and leaves
    a value the user set alone. Returns whether torch will use them."""
    if ("torch" not in sys.modules and os.environ.get("GNN_DIST_MALLOC", "auto") != "system"
            and activation_bytes >= tuning.HUGE_PAGES_MIN_BYTES):
        os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    return os.environ.get("THP_MEM_ALLOC_ENABLE") == "1"


def activation_bytes(meta: dict, hidden: int) -> int:
    """The largest rank's activation in bytes, from a partition's metadata: (inner + halo rows) x the wider
    of the input and hidden widths x 4 B (0 where the metadata does not say)."""
    rows = max((int(p.get("inner", 0)) + int(p.get("halo", 0)) for p in meta.get("parts") or [] if isinstance(p, dict)),
               default=0)
    return rows * max(int(meta.get("num_features") or 0), int(hidden or 0)) * 4


def resident_bytes() -> int:
    """This process's resident memory now (what `gnn-dist partition` estimates from, and `--memory-report`
    counts as the runtime's share before a partition is read)."""
    import psutil

    return int(psutil.Process().memory_info().rss)


def _libc(tuning: bool = True):
    """glibc's functions through ctypes, or None elsewhere (musl, macOS), or for `tuning` under
    GNN_DIST_MALLOC=system."""
    if tuning and os.environ.get("GNN_DIST_MALLOC", "auto") == "system":
        return None
    return _glibc()


@functools.cache
def _glibc():
    """The C library, once (find_library runs ldconfig), if it is glibc (mallopt and malloc_trim); else None.
    mallinfo2 (glibc 2.33+) is optional: older glibc is still tuned and trimmed, only `heap_stats` is None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.mallopt, libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError, TypeError):
        return None
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if hasattr(libc, "mallinfo2"):
        libc.mallinfo2.restype = _MallInfo2
    return libc


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


_TRIMMED = [0]  # free heap bytes right after the last trim: pages handed back, not resident


def heap_stats() -> tuple[int, int] | None:
    """(bytes glibc's malloc holds from the kernel: heaps and mmapped blocks, bytes of it free now), or None
    off glibc and before glibc 2.33 (no mallinfo2). The free bytes include what `release_free_memory` handed
    back (`trimmed_bytes`)."""
    libc = _libc(tuning=False)
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    info = libc.mallinfo2()
    return int(info.arena + info.hblkhd), int(info.fordblks)


def trimmed_bytes() -> int:
    """Free heap bytes whose pages the last `release_free_memory` handed back (so not resident then)."""
    return _TRIMMED[0]


def release_free_memory() -> bool:
    """Hand the heap's free pages back to the kernel (glibc's malloc_trim), once a one-off phase is over.

    Building a part's sparse operators allocates hundreds of MB of temporaries (scipy's float64 values, int64
    copies, transposes) in blocks under the 32 MB mmap ceiling; `keep_freed_memory` keeps them on the heap
    (160 MB per rank at 1M nodes and P=4), where the first step's tensors reuse only some of them: trimming
    lowered that step's peak by 22-78 MB per rank. Steps keep their own freed blocks (nothing calls this per
    step: the next step would fault them in again). Returns whether glibc was asked."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    _TRIMMED[0] = (heap_stats() or (0, 0))[1]
    return True


def keep_freed_memory() -> bool:
    """Tune glibc's malloc for reuse; returns whether it was applied (False off glibc or when disabled).

    With torch's huge pages on (THP_MEM_ALLOC_ENABLE=1, set before this runs) and the kernel able to give
    them, blocks of 2 MB and more are mapped afresh instead: a fresh mapping then costs one fault per 2 MB,
    and a step's mid-sized tensors (16 MB at 1M nodes and P=4) left holes on the heap that grew it epoch
    after epoch. Where the kernel's huge pages are off (`never`, common on HPC nodes) a fresh mapping is
    faulted in 4 KB at a time, so blocks up to 32 MB stay on the heap as without them."""
    libc = _libc()
    if libc is None:
        return False  # not glibc (musl, macOS), or GNN_DIST_MALLOC=system: nothing to tune
    mmap_from = HUGE_PAGE if os.environ.get("THP_MEM_ALLOC_ENABLE") == "1" and _kernel_huge_pages() else MMAP_THRESHOLD_MAX
    trim = tuning.MALLOC_TRIM_THRESHOLD_BYTES
    return bool(libc.mallopt(M_MMAP_THRESHOLD, mmap_from)) and bool(libc.mallopt(M_TRIM_THRESHOLD, trim))


def _kernel_huge_pages() -> bool:
    """Whether the kernel backs a madvise()d mapping with huge pages (torch asks that way): its mode is not
    `never` (False where the setting cannot be read: no THP in that kernel)."""
    try:
        with open(KERNEL_HUGE_PAGES) as f:
            return "[never]" not in f.read()
    except OSError:
        return False
