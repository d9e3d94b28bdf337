"""Machine profiles: what one core computes per second, how cores are shared, what a link carries.

The cost model (partition.costmodel) turns a partition's counts into seconds with these figures. A profile
is a small JSON file (`--machine FILE`, written by `gnn-dist profile-machine` or the network lab); without
one, DEFAULT is used, the same on every machine, so the default partition does not depend on where it was
made. Rates are per core; a rank runs on `cores_per_host / ranks sharing its host` cores. A host may hold a
fraction of a core (a container's CPU limit, the network lab's emulated hosts at `--cores-per-host 0.22`): its
ranks compute at that fraction of a core's rates.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Sequence

from partition.errors import DataError

NARROW, WIDE = 16, 128  # columns: the widths the profile's mean rates and its wide rates stand for


@dataclass(frozen=True)
class Machine:
    """One kind of host and the links between ranks. Units in the field names."""

    name: str
    sparse_per_core: float  # sparse products: edge x column multiply-adds per second on one core
    dense_per_core: float  # dense products: floating-point operations per second on one core
    elementwise_per_core: float  # elementwise passes (dropout, ReLU, bias, their gradients): values per second
    step_s: float  # a training step's fixed cost on one core, whatever the graph: Python, autograd, the optimiser
    cores_per_host: float  # cores every rank on a host shares; fractions for a CPU quota (older profiles: whole)
    ranks_per_host: int  # ranks placed on one host (0: all ranks on one host)
    link_bytes_per_s: float  # each rank's link, per direction
    latency_s: float  # per message, so per peer and all-to-all
    link_burst_bytes: float = 0.0  # token-bucket shaping (tc tbf, many clouds): bytes an epoch passes at line speed
    # sparse products whose source rows stay in cache: edge x column multiply-adds per second on one core, and
    # the host's last-level cache, which its ranks share (0 and 0: every read at sparse_per_core, as profiles before)
    sparse_hot_per_core: float = 0.0
    cache_bytes: float = 0.0
    # an epoch's cost whatever the graph, among these ranks: the wall seconds of an epoch of a tiny graph's
    # training (Python, autograd, the exchange's machinery, every meeting's wake-ups); 0: priced from step_s
    # and latency_s instead (the default profile, profiles without the measurement)
    epoch_fixed_s: float = 0.0
    epoch_fixed_ranks: int = 0  # how many ranks epoch_fixed_s was measured among (0: not recorded, older profiles)
    # a shaped link's configured rate (the lab's tc tbf `--rate`), bytes per second: what its token bucket refills
    # at, which a measured `link_bytes_per_s` (gloo's all-to-alls through it) does not say; 0: not shaped or not known
    link_rate_bytes_per_s: float = 0.0
    # a sparse product's work per output row, whatever its edges (the row's loop, writing its output): output
    # row-columns per second on one core. Weighs on parts of few edges a row (a grid's 4); 0: not measured, and
    # then folded into the edge rates, as measured at 10 edges a row (profiles before it)
    sparse_row_per_core: float = 0.0
    # the rates of a layer WIDE columns wide (a sparse product's edge rate, a WIDE x WIDE dense product's flops): the
    # rates above are means over widths that the narrow ones dominate, and a wide row runs faster per column
    # (one random row read brings 512 bytes, not 64; a large matrix product keeps the vector units busy). Widths
    # between NARROW and WIDE are priced between the two (`width_speedup`); 0: not measured, every width alike
    sparse_wide_per_core: float = 0.0
    dense_wide_per_core: float = 0.0
    # the sparse product from cache WIDE columns wide: a row in cache gains more from width than one from memory
    # (the lab's hosts: 1.65-2.68x its narrow mean against 1.38-1.71x, `core_rates.compute_rates`), and a
    # power-law part reads its hubs there; 0: not measured, and reads from cache speed up as those from memory
    sparse_hot_wide_per_core: float = 0.0
    # the WIDE kernels again on operands that fit the cache: a WIDE x WIDE dense product's flops and an elementwise
    # pass's values per second, on a rank's part small enough that a WIDE-wide layer stays in its cache share (here
    # 62,500 rows of 128 columns, 32 MB, ran dense products 1.3x and elementwise passes 1.6x faster than 75,000
    # rows did: the grid's 4-part ranks computed 1.5x faster per row than its 2-part ranks). 0: not measured, and
    # every size at the rates above (measured on operands larger than the cache)
    dense_cached_per_core: float = 0.0
    elementwise_cached_per_core: float = 0.0
    # what a byte sent or received costs the rank's CPU (gloo's threads, the kernel's network stack where it runs
    # in the rank's time): CPU seconds per byte, at one core, out of the rank's cores like its compute. 0: not
    # measured (profiles without --link), free. The lab's profiles: 0.38-0.76 s per GB (docs/benchmarks.md)
    wire_cpu_s_per_byte: float = 0.0

    def fits(self, nbytes: float, sharing: int) -> bool:
        """Whether an operand of `nbytes` stays in a rank's share of the host's last-level cache (its `sharing`
        ranks split it)."""
        return bool(self.cache_bytes) and nbytes <= self.cache_bytes / max(1, sharing)

    def elementwise_rate(self, nbytes: float, sharing: int) -> float:
        """Values per second of an elementwise pass over a tensor of `nbytes`: the cached rate where it fits
        the rank's cache share and the profile measured one, else the mean rate."""
        if self.elementwise_cached_per_core and self.fits(nbytes, sharing):
            return self.elementwise_cached_per_core
        return self.elementwise_per_core

    def width_speedup(self, kernel: str, width: float, cached: bool = False) -> float:
        """How much faster than its profile rate a `kernel` ("sparse", "sparse_hot", "dense") runs `width` columns wide
        (a dense product: the geometric mean of its two widths): 1 up to NARROW, the measured wide rate's
        ratio from WIDE on, log-linear between (no extrapolation past either). The means stand for NARROW: the
        profile's narrow products dominate them (a harmonic mean). "sparse_hot": a sparse product's reads from
        cache, at their own wide rate where measured with their own narrow rate (else as "sparse": reads from
        memory). `cached`: a dense product whose operands fit the
        cache, towards the cached wide rate instead (where measured)."""
        if kernel not in ("sparse", "sparse_hot", "dense"):
            raise ValueError(f"width_speedup: kernel must be 'sparse', 'sparse_hot' or 'dense', got {kernel!r}")
        if kernel == "sparse_hot" and not (self.sparse_hot_wide_per_core and self.sparse_hot_per_core):
            kernel = "sparse"  # not measured: reads from cache gain from width as reads from memory do
        base, wide = {"sparse": (self.sparse_per_core, self.sparse_wide_per_core),
                      "sparse_hot": (self.hot_rate, self.sparse_hot_wide_per_core),
                      "dense": (self.dense_per_core, self.dense_wide_per_core)}[kernel]
        if kernel == "dense" and cached and self.dense_cached_per_core:
            wide = self.dense_cached_per_core
        if not wide or width <= NARROW:
            return 1.0
        return (wide / base) ** min(1.0, math.log(width / NARROW) / math.log(WIDE / NARROW))

    def describe(self) -> str:
        """One line: what the predictions assume."""
        hosts = "all ranks on one host" if self.ranks_per_host == 0 else f"{self.ranks_per_host} rank(s) per host"
        return (f"machine '{self.name}': sparse {self.sparse_per_core / 1e9:.2f} G edge-columns/s, dense "
                f"{self.dense_per_core / 1e9:.1f} GFLOP/s, elementwise {self.elementwise_per_core / 1e9:.2f} "
                f"G values/s per core, step {self.step_s * 1e3:.1f} ms; {self.cores_per_host:g} cores per host, {hosts}; link "
                f"{self.link_bytes_per_s * 8 / 1e9:.3g} Gbit/s, latency {self.latency_s * 1e6:.0f} us"
                + (f", burst {self.link_burst_bytes / 1024:.0f} KiB" if self.link_burst_bytes else "")
                + (f" (shaped at {self.link_rate_bytes_per_s * 8 / 1e9:.3g} Gbit/s)" if self.link_rate_bytes_per_s else "")
                + (f"; rows in cache ({self.cache_bytes / 2 ** 20:.3g} MiB a host) read at {self.hot_rate / 1e9:.2f} "
                   f"G edge-columns/s" if self.cache_bytes else "")
                + (f"; sparse rows {self.sparse_row_per_core / 1e9:.2f} G row-columns/s" if self.sparse_row_per_core else "")
                + (f"; {WIDE} wide: sparse {self.sparse_wide_per_core / 1e9:.2f} G edge-columns/s"
                   if self.sparse_wide_per_core else "")
                + (f"; {WIDE} wide from cache: sparse {self.sparse_hot_wide_per_core / 1e9:.2f} G edge-columns/s"
                   if self.sparse_hot_wide_per_core else "")
                + (f"; {WIDE} wide: dense {self.dense_wide_per_core / 1e9:.1f} GFLOP/s" if self.dense_wide_per_core else "")
                + (f"; in cache: dense {self.dense_cached_per_core / 1e9:.1f} GFLOP/s" if self.dense_cached_per_core else "")
                + (f"; in cache: elementwise {self.elementwise_cached_per_core / 1e9:.2f} G values/s"
                   if self.elementwise_cached_per_core else "")
                + (f"; the wire's CPU {self.wire_cpu_s_per_byte * 1e9:.2f} s per GB" if self.wire_cpu_s_per_byte else "")
                + (f"; an epoch's fixed cost {self.epoch_fixed_s * 1e3:.1f} ms" if self.epoch_fixed_s else "")
                + (f" among {self.epoch_fixed_ranks} ranks" if self.epoch_fixed_s and self.epoch_fixed_ranks else ""))

    @property
    def hot_rate(self) -> float:
        """Edge-columns per second on one core when the source rows are in cache (profiles without the
        measurement: the random-column rate)."""
        return self.sparse_hot_per_core or self.sparse_per_core

    def with_link(self, bits_per_s: float, latency_s: float | None = None, ranks_per_host: int | None = None,
                  name: str | None = None) -> "Machine":
        """The same cores behind another link (what the network lab writes)."""
        return Machine(**dict(asdict(self), link_bytes_per_s=bits_per_s / 8,
                              latency_s=self.latency_s if latency_s is None else latency_s,
                              ranks_per_host=self.ranks_per_host if ranks_per_host is None else ranks_per_host,
                              name=name or self.name))


# Measured on the project's 2-core development box (AMD EPYC, torch 2.13 CPU), 2026-12-04: the per-core rates and
# the step by `gnn-dist profile-machine` (one thread per kernel, nothing else running on purpose; the box is
# shared, so +-30% from run to run), the link and latency by `scripts/netlab.py profile` with 4 ranks at
# 1 Gbit/s (what gloo's all-to-alls get through tc's 1 Gbit/s: 0.63 Gbit/s); the rate of rows in cache and the
# cache (its 32 MiB last level) by `gnn-dist profile-machine` on 2026-12-05. sparse_per_core is the older
# operand's (200k random rows, which narrow widths still read from cache; today's cold operand gives 0.98e9):
# kept, since the node weights use it and a new value would move default partitions. One rank per host with 2 cores
# and its own link. Fixed here so that a partition made anywhere is the same partition.
DEFAULT = Machine(name="default", sparse_per_core=2.05e9, dense_per_core=33.0e9, elementwise_per_core=0.92e9,
                  step_s=1.04e-3, cores_per_host=2, ranks_per_host=1, link_bytes_per_s=0.63e9 / 8,
                  latency_s=646e-6, sparse_hot_per_core=4.29e9, cache_bytes=float(32 << 20))


# Each number's plausible range (low, high): a profile outside them is a typo or a lie, and the model's
# seconds would overflow to inf or round to nothing. Rates span a slow core to a large accelerator.
LIMITS = {"sparse_per_core": (1e3, 1e15), "dense_per_core": (1e3, 1e16), "elementwise_per_core": (1e3, 1e15),
          "step_s": (0.0, 3600.0), "cores_per_host": (0.01, 1 << 20), "ranks_per_host": (0, 1 << 20),
          "link_bytes_per_s": (1e3, 1e13), "latency_s": (0.0, 60.0), "link_burst_bytes": (0.0, 1e15),
          "sparse_hot_per_core": (1e3, 1e15), "cache_bytes": (1024.0, 1e15),
          "epoch_fixed_s": (1e-6, 3600.0), "epoch_fixed_ranks": (0, 1 << 20), "link_rate_bytes_per_s": (1e3, 1e13),
          "sparse_row_per_core": (1e3, 1e15), "sparse_wide_per_core": (1e3, 1e15), "dense_wide_per_core": (1e3, 1e16),
          "sparse_hot_wide_per_core": (1e3, 1e15), "dense_cached_per_core": (1e3, 1e16),
          "elementwise_cached_per_core": (1e3, 1e15), "wire_cpu_s_per_byte": (1e-15, 1e-3)}
# absent from older profiles: 0, not measured
OPTIONAL = ("link_burst_bytes", "sparse_hot_per_core", "cache_bytes", "epoch_fixed_s", "epoch_fixed_ranks",
            "link_rate_bytes_per_s", "sparse_row_per_core", "sparse_wide_per_core", "dense_wide_per_core",
            "sparse_hot_wide_per_core", "dense_cached_per_core", "elementwise_cached_per_core", "wire_cpu_s_per_byte")
# 0 (not measured) or within LIMITS: a rate of 1e-300 would price a product at 1e305 s, and a fixed epoch of
# 1e-320 s would switch the model to a measured fixed cost of nothing
UNMEASURED_ZERO = ("sparse_hot_per_core", "cache_bytes", "epoch_fixed_s", "link_rate_bytes_per_s",
                   "sparse_row_per_core", "sparse_wide_per_core", "dense_wide_per_core", "sparse_hot_wide_per_core",
                   "dense_cached_per_core", "elementwise_cached_per_core", "wire_cpu_s_per_byte")
WHOLE = ("ranks_per_host", "epoch_fixed_ranks")


def _number(name: str, v: object, source: str) -> float | int:
    """One field's value, checked against LIMITS (whole numbers for the counts): one line if it is not."""
    lo, hi = LIMITS[name]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        raise DataError(f"machine profile {source}: '{name}' must be a number, got {str(v)[:40]!r}")
    if name in WHOLE and isinstance(v, float) and v != int(v):
        raise DataError(f"machine profile {source}: '{name}' must be a whole number, got {v!r}")
    fmt = "d" if name in WHOLE else "g"
    if name in UNMEASURED_ZERO and v == 0:
        return 0.0
    if name in UNMEASURED_ZERO and not lo <= v <= hi:
        raise DataError(f"machine profile {source}: '{name}' must be 0 (not measured) or between {lo:g} and {hi:g}, "
                        f"got {str(v)[:40]}")
    if not lo <= v <= hi:  # exact for ints of any size: no float conversion
        raise DataError(f"machine profile {source}: '{name}' must be between {lo:{fmt}} and {hi:{fmt}}, got {str(v)[:40]}")
    return int(v) if name in WHOLE else float(v)


def good_name(v: object) -> bool:
    """A profile's name: one printable line, short enough to print beside every prediction."""
    return isinstance(v, str) and v.isprintable() and 0 < len(v) <= 100


def from_dict(data: object, source: str) -> Machine:
    """A profile from parsed JSON, every field checked: one line naming the first bad one."""
    if not isinstance(data, dict):
        raise DataError(f"machine profile {source}: expected a JSON object, got {type(data).__name__}")
    names = [f.name for f in fields(Machine)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise DataError(f"machine profile {source}: unknown field '{unknown[0]}' (fields: {', '.join(names)})")
    out: dict = {}
    for name in names:
        if name in OPTIONAL and name not in data:  # most links shape no bursts; older profiles lack the cache
            continue
        if name not in data:
            raise DataError(f"machine profile {source} lacks the field '{name}'")
        v = data[name]
        if name == "name":
            if not good_name(v):
                raise DataError(f"machine profile {source}: 'name' must be a printable string of 1 to 100 "
                                f"characters, got {str(v)[:40]!r}")
            out[name] = v
            continue
        out[name] = _number(name, v, source)
    return Machine(**out)


def median_profile(profiles: Sequence[Machine], name: str) -> Machine:
    """One profile from several of one kind of host measured at different times: each rate the median of those
    measured (a field 0 in one profile, not measured there, is left out of its median). Why: on a shared box a
    profile taken once is one moment of it, and its rates move by tens of percent from one to the next
    (docs/benchmarks.md, "Three sets of profiles"). A wide rate is priced as its ratio to its narrow one
    (`Machine.width_speedup`): it is the median ratio times the median narrow rate, kept within the wide rates
    measured and then within the ratios measured; fixed epochs measured among different rank counts are
    refused (their costs differ by the count)."""
    if not profiles:
        raise DataError("a median of machine profiles needs at least one")
    for what, values in (("cores a host", {m.cores_per_host for m in profiles}),
                         ("ranks a host", {m.ranks_per_host for m in profiles}),
                         ("link rates, bytes/s", {m.link_rate_bytes_per_s for m in profiles} - {0.0})):  # 0: not known
        if len(values) > 1:
            raise DataError(f"{name}: profiles of different hosts have no median ({what}: "
                            f"{', '.join(f'{v:g}' for v in sorted(values))})")
    out: dict = {"name": name}
    for f in fields(Machine):
        if f.name == "name":
            continue
        values = [getattr(m, f.name) for m in profiles]
        if f.name in UNMEASURED_ZERO:
            values = [v for v in values if v] or [0.0]
        if f.name == "epoch_fixed_ranks":  # among how many ranks the fixed epochs kept were measured: one count
            values = sorted({m.epoch_fixed_ranks for m in profiles if m.epoch_fixed_s and m.epoch_fixed_ranks}) or [0]
            if len(values) > 1:
                raise DataError(f"{name}: fixed epochs measured among different rank counts have no median "
                                f"({', '.join(map(str, values))} ranks)")
        out[f.name] = statistics.median_high(values) if f.name in WHOLE else statistics.median(values)
    for wide, narrow in WIDE_OF.items():
        pairs = [(getattr(m, wide), getattr(m, narrow)) for m in profiles if getattr(m, wide) and getattr(m, narrow)]
        if pairs:  # within the wide rates measured (the median ratio times the median narrow rate may pass them
            # all), then within the ratios measured (a narrow median from profiles without a wide rate may sit
            # above every wide one): the ratio, what the model prices, wins
            ratios = [w / n for w, n in pairs]
            rate = min(max(statistics.median(ratios) * out[narrow], min(w for w, _ in pairs)), max(w for w, _ in pairs))
            out[wide] = min(max(rate, min(ratios) * out[narrow]), max(ratios) * out[narrow])
    return from_dict(out, f"{name} (the median of {len(profiles)} profile{'s' * (len(profiles) > 1)})")


# each wide rate and the narrow rate `Machine.width_speedup` takes its ratio to
WIDE_OF = {"sparse_wide_per_core": "sparse_per_core", "sparse_hot_wide_per_core": "sparse_hot_per_core",
           "dense_wide_per_core": "dense_per_core", "dense_cached_per_core": "dense_per_core"}


def load(path: str | None) -> Machine:
    """The profile in `path`, or DEFAULT without one."""
    if path is None:
        return DEFAULT
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise DataError(f"machine profile {path} cannot be read: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise DataError(f"machine profile {path} is not JSON: {e}") from None
    return from_dict(data, path)


def save(machine: Machine, path: str) -> None:
    """Write atomically: a profile is either the old one or the new one, never half of one."""
    from partition.errors import UsageError
    from partition.store import write_atomic

    fields_ = asdict(machine)
    from_dict(fields_, f"{path} (as measured)")  # a wild measurement is one line, never a profile that cannot load
    target = Path(path)
    try:
        write_atomic(target, lambda f: f.write((json.dumps(fields_, indent=2) + "\n").encode()))
    except OSError as e:
        target.with_name(target.name + ".tmp").unlink(missing_ok=True)
        raise UsageError(f"cannot write the machine profile {path}: {e.strerror or e}") from None
