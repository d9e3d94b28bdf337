"""The cost model's rows in cache: a part's reads of its most-read rows at the profile's hot rate, the rest at
the random-column rate (partition.step_work.sparse_seconds), and the profile fields that carry it."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from gnn_dist.data import load_dataset
from partition import assign_parts
from partition.costmodel import predict
from partition.errors import DataError, PartitionFormatError
from partition.machine import DEFAULT, Machine, from_dict, load, median_profile, save
from partition.part_counts import part_counts, parts_from_meta, top_reads
from partition.step_work import Workload, hot_reads, layers
from partition.store import read_meta
from tests.conftest import run_cli, run_mpi

# every rate a round number; rows in cache read 4x as fast; 64 KiB of cache
CACHED = Machine(name="cached", sparse_per_core=1e9, dense_per_core=1e10, elementwise_per_core=1e9, step_s=0.0,
                 cores_per_host=2, ranks_per_host=1, link_bytes_per_s=1e8, latency_s=1e-4,
                 sparse_hot_per_core=4e9, cache_bytes=float(64 << 10))
WORK = Workload(features=20, classes=8, hidden=8, layers=1, overlap=False)  # 20 > 2 x 8: one product of width 8, both ways


def test_top_reads_and_hot_reads_by_hand():
    # rows read 1, 5, 1, 3 times: most-read first 5, 8, 9, 10; kept at the 1st, 2nd and 4th
    top = top_reads(np.array([1, 5, 1, 3]))
    assert top == [5, 8, 10]
    # the rows read at least so many times: the 3rd and 4th (once each) count from 1, the 2nd from 3
    assert [hot_reads(top, t) for t in (0.5, 1, 2, 3, 4, 5, 6)] == [10.0, 10.0, 8.0, 8.0, 5.0, 5.0, 0.0]
    assert top_reads(np.array([], dtype=np.int64)) == [0] and top_reads(np.array([7])) == [7]
    # 5 rows read 4, 3, 2, 2, 2 times: kept at the 1st, 2nd, 4th and 5th; the last step is the 5th row alone
    # (read twice), not 4 rows read half a time each
    top = top_reads(np.array([2, 4, 2, 3, 2]))
    assert top == [4, 7, 11, 13]
    assert [hot_reads(top, t, 5) for t in (2, 2.5, 3)] == [13.0, 7.0, 7.0]
    assert hot_reads(top, 2) == 11.0  # without the row count, the last step's mean is 2 / 4


def test_a_part_whose_rows_all_fit_is_priced_all_hot():
    """A part of 2^k + m rows, each read at least once, whose reads fit the cache: every read hot, the m
    rows of the last step among them (their mean was taken over 2^k rows, so they were priced cold)."""
    counts = np.array([64] + [3] * 1000 + [1] * 100)  # 1101 rows: the last step is rows 1025-1101, read once
    part = {"inner": 1101, "halo": 0, "central": 1101, "sent": 0, "edges": int(counts.sum()) - 1101,
            "top_reads": top_reads(counts)}
    m = Machine(**dict(CACHED.__dict__, cache_bytes=float(counts.sum() * 8 * 4 * 2)))  # threshold: half a read
    assert predict([part], WORK, m).ranks[0].sparse_s == pytest.approx(2 * 8 * counts.sum() / 4e9)


def _graph(skewed: bool, n: int = 20_000, e: int = 200_000) -> tuple[np.ndarray, np.ndarray]:
    """`e` edges among `n` nodes, every node receiving about as many; sources uniform, or drawn from a
    power law (a few hubs read by most edges)."""
    rng = np.random.default_rng(0)
    dst = rng.integers(0, n, e)
    src = (np.minimum(rng.zipf(1.5, e) - 1, n - 1) if skewed else rng.integers(0, n, e))
    return src, dst


def test_a_skewed_graph_is_predicted_faster_than_a_uniform_one_of_the_same_size():
    one = np.zeros(20_000, dtype=np.int64)
    uniform, skewed = (part_counts(*_graph(s), one, 1)[0] for s in (False, True))
    assert (uniform["edges"], uniform["inner"]) == (skewed["edges"], skewed["inner"])
    u, s = (predict([p], WORK, CACHED).ranks[0] for p in (uniform, skewed))
    assert s.sparse_s < 0.6 * u.sparse_s, (s.sparse_s, u.sparse_s)
    # the arithmetic: hot are the rows read at least once in every 64 KiB of 8-column rows read (2048 reads),
    # each product twice (forward, backward); the uniform graph's rows are read about 11 times in 220,000
    for part, r in ((uniform, u), (skewed, s)):
        reads = part["edges"] + part["inner"]
        hot = hot_reads(part["top_reads"], reads / 2048)
        assert r.sparse_s == pytest.approx(2 * 8 * (hot / 4e9 + (reads - hot) / 1e9))
    assert u.sparse_s == pytest.approx(2 * 8 * (uniform["edges"] + uniform["inner"]) / 1e9)
    # without the measurement (older profiles, older partitions), every read at the random-column rate
    cold = Machine(**dict(CACHED.__dict__, sparse_hot_per_core=0.0, cache_bytes=0.0))
    assert predict([skewed], WORK, cold).ranks[0].sparse_s == pytest.approx(2 * 8 * (skewed["edges"] + skewed["inner"]) / 1e9)
    old = {k: v for k, v in skewed.items() if k != "top_reads"}
    assert predict([old], WORK, CACHED).ranks[0].sparse_s == predict([skewed], WORK, cold).ranks[0].sparse_s
    assert (layers(WORK)[0].width, layers(WORK)[0].backward_sparse) == (8, True)


def test_partition_json_keeps_each_parts_top_reads(tmp_path):
    spec = "rmat:scale=11,edges=30000,seed=2"
    r = run_cli("partition", "--dataset", spec, "--parts", "3", "--balance", "nodes", "--out", str(tmp_path / "p"))
    assert r.returncode == 0, r.stderr
    g = load_dataset(spec)
    counts = part_counts(*g.edge_index(), assign_parts(g, 3, "metis"), 3)  # the same assignment, from the graph
    kept = parts_from_meta(read_meta(tmp_path / "p"))
    assert [p["top_reads"] for p in kept] == [c["top_reads"] for c in counts]
    assert [p["halo_edges"] for p in kept] == [c["halo_edges"] for c in counts] and sum(c["halo_edges"] for c in counts)


def test_an_edited_partition_json_is_one_line(tmp_path):
    """partition.json has no checksum of its own: counts and top_reads edited into garbage are refused by
    name (train prices the partition on rank 0 before the first epoch; a traceback there was the symptom)."""
    good = {"inner": 4, "central": 2, "halo": 3, "edges": 9, "top_reads": [3, 5, 9, 13]}
    meta = {"parts": [good, dict(good, top_reads=None)], "stats": {"send_per_part": [3, 3]}}
    assert [p["top_reads"] for p in parts_from_meta(meta)] == [[3, 5, 9, 13], None]  # older partitions: none
    assert [p["halo_edges"] for p in parts_from_meta(meta)] == [None, None]
    for key, lie in (("top_reads", ["x"]), ("top_reads", [5, 3]), ("top_reads", 7), ("top_reads", []),
                     ("inner", "4"), ("edges", -1), ("halo", True), ("central", 2.5), ("halo_edges", 10),
                     ("halo_edges", 2), ("halo_edges", -1), ("halo_edges", "3")):
        with pytest.raises(PartitionFormatError, match=f"part 1's '{key}'"):
            parts_from_meta({"parts": [good, dict(good, **{key: lie})]})
    with pytest.raises(PartitionFormatError, match="part 0's 'sent'"):
        parts_from_meta(dict(meta, stats={"send_per_part": ["3", 3]}))


def test_profiles_with_and_without_the_cache_fields(tmp_path):
    f = tmp_path / "m.json"
    save(CACHED, str(f))
    assert load(str(f)) == CACHED and "rows in cache (0.0625 MiB a host) read at 4.00" in CACHED.describe()
    assert DEFAULT.sparse_hot_per_core > DEFAULT.sparse_per_core and DEFAULT.cache_bytes > 0
    old = {k: v for k, v in json.loads(f.read_text()).items() if k not in ("sparse_hot_per_core", "cache_bytes")}
    m = from_dict(old, "old.json")  # written before the fields: every read at the random-column rate
    assert (m.sparse_hot_per_core, m.cache_bytes, m.hot_rate) == (0.0, 0.0, 1e9) and "in cache" not in m.describe()
    # 0 is "not measured"; a lying tiny value (a rate of 1e-300 prices a product at 1e305 s) is refused
    for field, lie in (("sparse_hot_per_core", -1), ("cache_bytes", -1), ("sparse_hot_per_core", 1e-300),
                       ("cache_bytes", 0.5), ("epoch_fixed_s", 1e-320), ("epoch_fixed_s", -0.001)):
        with pytest.raises(DataError, match=f"'{field}' must be 0 \\(not measured\\) or between"):
            from_dict(dict(old, **{field: lie}), "m.json")
    assert from_dict(dict(old, sparse_hot_per_core=0, epoch_fixed_s=0.0), "m.json").hot_rate == 1e9
    for lie, needle in ((2.5, "a whole number"), (-1, "between 0 and"), ("4", "a number")):
        with pytest.raises(DataError, match=f"'epoch_fixed_ranks' must be {needle}"):
            from_dict(dict(old, epoch_fixed_ranks=lie), "m.json")


def test_partition_says_when_the_fixed_epoch_was_measured_among_other_ranks(tmp_path):
    """A fixed epoch measured among 2 ranks prices 4 parts with 2 ranks' cost: said, not silent."""
    f = tmp_path / "m.json"
    save(dataclasses.replace(CACHED, epoch_fixed_s=0.007, epoch_fixed_ranks=2), str(f))
    r = run_cli("partition", "--dataset", "sbm:nodes=400", "--parts", "4", "--balance", "nodes", "--machine", str(f),
                "--out", str(tmp_path / "p"))
    assert r.returncode == 0, r.stderr
    assert "fixed epoch was measured among 2 ranks, not 4" in r.stderr and "mpiexec -n 4" in r.stderr, r.stderr


@pytest.mark.slow
def test_profile_machine_among_ranks_keeps_the_hosts_cache(tmp_path):
    """Ranks' rates are summed over the cores they share; the cache is the host's, whatever the ranks."""
    single, linked = tmp_path / "one.json", tmp_path / "two.json"
    assert run_cli("profile-machine", "--out", str(single), "--rows", "2000", "--repeat", "1").returncode == 0
    run_mpi(2, "profile-machine", "--link", "--out", str(linked), "--rows", "2000", "--repeat", "1")
    one, two = load(str(single)), load(str(linked))
    assert one.cache_bytes == two.cache_bytes > 0 and two.sparse_hot_per_core > 0 and two.latency_s > 0
    # the wide kernels again on operands in a rank's share of the cache (the 2 ranks' halves here)
    assert one.dense_cached_per_core > 0 and two.elementwise_cached_per_core > 0 and "in cache" in two.describe()
    # among ranks, an epoch's fixed cost from a tiny training (alone, none: step_s and the latency stand for it)
    assert one.epoch_fixed_s == 0.0 and 0.0 < two.epoch_fixed_s < 1.0 and "fixed cost" in two.describe()
    assert (one.epoch_fixed_ranks, two.epoch_fixed_ranks) == (0, 2) and "among 2 ranks" in two.describe()
    # what the bytes cost the ranks' CPU: measured among ranks (loopback TCP costs some), not alone
    assert one.wire_cpu_s_per_byte == 0.0 and 1e-13 < two.wire_cpu_s_per_byte < 1e-6 and "per GB" in two.describe()


def test_the_wire_cpu_is_the_payloads_cpu_over_the_bytes_in_and_out():
    """4 ranks, 1 MiB to each of 3 peers: 6 MiB sent and received an all-to-all; 6 ms of CPU beyond an empty
    one is 1 ns a byte (what `profile-machine --link` keeps as wire_cpu_s_per_byte)."""
    from gnn_dist.cli.profile_machine import wire_cpu

    assert wire_cpu(4, 1 << 20, 0.001, 0.001 + 6 * (1 << 20) * 1e-9) == pytest.approx(1e-9)
    assert wire_cpu(2, 1 << 20, 0.002, 0.001) == 0.0  # noise: the empty all-to-all cost more
    assert wire_cpu(2, 1 << 20, 0.0, 1e-12) == 0.0  # below the profile's floor: not measured, not refused
    assert from_dict(dict(dataclasses.asdict(DEFAULT), wire_cpu_s_per_byte=0.0), "m").wire_cpu_s_per_byte == 0.0


def test_a_median_of_profiles_takes_each_field_over_those_that_measured_it():
    a = dataclasses.replace(CACHED, sparse_per_core=1e9, sparse_hot_per_core=0.0, epoch_fixed_s=0.5, epoch_fixed_ranks=2)
    b = dataclasses.replace(CACHED, sparse_per_core=3e9, sparse_hot_per_core=5e9, epoch_fixed_s=0.7, epoch_fixed_ranks=2)
    c = dataclasses.replace(CACHED, sparse_per_core=2e9, sparse_hot_per_core=6e9, epoch_fixed_s=0.6, epoch_fixed_ranks=2)
    m = median_profile([a, b, c], "m")
    assert (m.name, m.sparse_per_core, m.dense_per_core, m.epoch_fixed_s) == ("m", 2e9, CACHED.dense_per_core, 0.6)
    assert m.sparse_hot_per_core == 5.5e9  # a's 0 was not measured: the median of b's and c's
    assert m.epoch_fixed_ranks == 2
    # a profile that measured no fixed epoch, or did not record among how many ranks, does not count
    unmeasured = dataclasses.replace(a, epoch_fixed_s=0.0, epoch_fixed_ranks=0)
    unrecorded = dataclasses.replace(a, epoch_fixed_ranks=0)
    assert median_profile([unmeasured, unrecorded, c], "m").epoch_fixed_ranks == 2
    with pytest.raises(DataError, match=r"m: fixed epochs measured among different rank counts .*\(2, 8 ranks\)"):
        median_profile([a, dataclasses.replace(c, epoch_fixed_ranks=8)], "m")  # 2 ranks' cost is not 8 ranks'
    assert median_profile([a], "m") == dataclasses.replace(a, name="m")
    with pytest.raises(DataError, match="different hosts"):
        median_profile([a, dataclasses.replace(a, cores_per_host=0.45)], "m")
    with pytest.raises(DataError, match="at least one"):
        median_profile([], "m")


def test_a_median_profile_keeps_the_width_ratio_the_profiles_measured():
    """A wide rate is priced as its ratio to the narrow one: the median's ratio is the median ratio (1.2),
    not the ratio of the two medians (3.6e9 / 2e9 = 1.8, which no profile measured)."""
    ps = [dataclasses.replace(CACHED, sparse_per_core=s, sparse_wide_per_core=w)
          for s, w in ((1e9, 1.2e9), (2e9, 2.4e9), (4e9, 3.6e9))]
    m = median_profile(ps, "m")
    assert m.sparse_per_core == 2e9 and m.sparse_wide_per_core == pytest.approx(2.4e9)
    assert m.width_speedup("sparse", 128) == pytest.approx(1.2)
    older = dataclasses.replace(CACHED, sparse_per_core=3e9)  # measured no wide rate: its ratio is left out
    assert median_profile(ps[:2] + [older], "m").sparse_wide_per_core == pytest.approx(1.2 * 2e9)
    # one ratio measured (1.5) against a narrow median of profiles without one (3e9): the wide rate follows the
    # ratio (4.5e9), not the one wide rate measured (1.5e9, a slowdown of 0.5 that nothing measured)
    one = [dataclasses.replace(CACHED, sparse_per_core=1e9, sparse_wide_per_core=1.5e9)] + [older] * 2
    assert median_profile(one, "m").width_speedup("sparse", 128) == pytest.approx(1.5)
