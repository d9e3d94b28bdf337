"""A small part's layer stays in the cache: its dense products and elementwise passes run faster per value than
on operands larger than the cache, which the profile's `--rows` operands are. On emulated hosts the grid's 4-part
ranks (62,500 rows of 128 columns: 32 MB) computed 1.5x faster per row than its 2-part ranks, and the model,
pricing both alike, predicted every 4- and 8-host grid row 1.3-1.5x too slow (docs/benchmarks.md, "The cost
model and the default partition on emulated hosts")."""
from __future__ import annotations

import dataclasses

import pytest

from partition.costmodel import predict, rank_phases
from partition.errors import DataError
from partition.machine import DEFAULT, from_dict
from partition.step_work import BYTES_PER_VALUE, Workload, dense_seconds, layers

MB = 1 << 20
MEASURED = dataclasses.replace(DEFAULT, cache_bytes=32.0 * MB, dense_wide_per_core=2 * DEFAULT.dense_per_core,
                               dense_cached_per_core=3 * DEFAULT.dense_per_core,
                               elementwise_cached_per_core=1.5 * DEFAULT.elementwise_per_core)
WORK = Workload(128, 16, 128, 3)


def part(inner: int, halo: int = 0) -> dict:
    return {"inner": inner, "central": inner, "halo": halo, "edges": 4 * inner, "sent": halo}


def test_a_tensor_that_fits_the_ranks_share_goes_at_the_cached_rate():
    fits = 32 * MB  # a 128-wide layer of 65,536 rows: the whole cache of a rank alone on its host
    assert MEASURED.elementwise_rate(fits, 1) == MEASURED.elementwise_cached_per_core
    assert MEASURED.elementwise_rate(fits + 1, 1) == MEASURED.elementwise_per_core
    assert MEASURED.elementwise_rate(fits, 2) == MEASURED.elementwise_per_core  # two ranks split the cache
    assert MEASURED.width_speedup("dense", 128, cached=True) == pytest.approx(3.0)
    assert MEASURED.width_speedup("dense", 128) == pytest.approx(2.0)
    assert MEASURED.width_speedup("sparse", 128, cached=True) == 1.0  # the sparse product prices its reads itself
    unmeasured = dataclasses.replace(MEASURED, dense_cached_per_core=0.0, elementwise_cached_per_core=0.0)
    assert unmeasured.elementwise_rate(1, 1) == DEFAULT.elementwise_per_core
    assert unmeasured.width_speedup("dense", 128, cached=True) == pytest.approx(2.0)


def test_a_small_parts_dense_and_elementwise_work_is_priced_at_the_cached_rates():
    rows = 30_000  # 15 MB a 128-wide layer: in cache
    small = predict([part(rows), part(rows)], WORK, MEASURED).ranks[0]
    plan = layers(WORK)
    flops = [2.0 * rows * la.d_in * la.d_out * (2 + (i > 0)) for i, la in enumerate(plan)]
    last = MEASURED.width_speedup("dense", (128 * 16) ** 0.5, cached=True)  # 128 -> 16: between the mean and cached
    assert small.dense_s == pytest.approx((flops[0] + flops[1]) / MEASURED.dense_cached_per_core
                                          + flops[2] / (DEFAULT.dense_per_core * last))
    values = sum(rows * ((1 if i == 0 else 2) * la.d_in + 2.0 * la.d_out) for i, la in enumerate(plan))  # features: forward
    assert small.elementwise_s == pytest.approx(values / MEASURED.elementwise_cached_per_core)
    assert dense_seconds(rows, plan, MEASURED) == pytest.approx(  # a node's weight asks no cache: the wide rate
        (flops[0] + flops[1]) / MEASURED.dense_wide_per_core + flops[2] / (
            DEFAULT.dense_per_core * MEASURED.width_speedup("dense", (128 * 16) ** 0.5)))


def test_a_large_part_is_priced_as_without_the_cached_rates():
    rows = 600_000  # 300 MB a 128-wide layer, 38 MB the 16-wide output
    assert rows * 128 * BYTES_PER_VALUE > MEASURED.cache_bytes
    without = dataclasses.replace(MEASURED, dense_cached_per_core=0.0, elementwise_cached_per_core=0.0)
    big = [predict([part(rows, 5000)] * 2, WORK, m) for m in (MEASURED, without)]
    assert big[0].epoch_s == big[1].epoch_s and big[0].ranks[0].dense_s == big[1].ranks[0].dense_s


def test_the_first_layers_halo_counts_in_its_inputs_size():
    """The first layer's elementwise pass runs over its input with the halo rows: 30,000 inner and 40,000 halo
    rows of 128 columns (34 MB) no longer fit, while its 30,000-row output does."""
    inner, halo = 30_000, 40_000
    got = predict([part(inner, halo)] * 2, WORK, MEASURED).ranks[0].elementwise_s
    plan = layers(WORK)
    cached, mean = MEASURED.elementwise_cached_per_core, MEASURED.elementwise_per_core
    expect = ((inner + halo) * plan[0].d_in / mean + 2.0 * inner * plan[0].d_out / cached  # features: forward only
              + 2.0 * sum(inner * (la.d_in + la.d_out) for la in plan[1:]) / cached)
    assert got == pytest.approx(expect)


def test_the_phases_sum_to_the_ranks_work_in_cache():
    p = {"inner": 20_000, "central": 12_000, "halo": 6_000, "sent": 6_000, "edges": 160_000}
    rank = predict([p, p], WORK, MEASURED).ranks[0]
    phases = rank_phases(p, layers(WORK), dataclasses.replace(MEASURED, step_s=0.0), 1, 1, True)
    assert sum(ph.work_s + ph.overlap_s for ph in phases) == pytest.approx(rank.sparse_s + rank.dense_s + rank.elementwise_s)


def test_profiles_carry_the_cached_rates_older_ones_load_and_bad_ones_are_one_line():
    data = dataclasses.asdict(MEASURED)
    assert from_dict(data, "m.json") == MEASURED and "in cache: dense" in MEASURED.describe()
    old = {k: v for k, v in data.items() if not k.endswith("_cached_per_core")}
    assert from_dict(old, "old.json").elementwise_rate(1, 1) == DEFAULT.elementwise_per_core
    for bad in (-1.0, float("nan"), "fast", 1e-300):
        with pytest.raises(DataError, match="elementwise_cached_per_core") as e:
            from_dict(dict(data, elementwise_cached_per_core=bad), "bad.json")
        assert "\n" not in str(e.value)
