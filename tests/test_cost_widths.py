"""A layer priced at its own width: the profile's mean rates are the narrow widths' (a harmonic mean over
16- to 128-wide products), and a 128-wide layer runs its sparse and dense products faster per column. On
emulated hosts of 0.45 core, GCN at hidden 128 was priced 1.8x its measured compute with the means alone
(docs/benchmarks.md, "The cost model on emulated hosts")."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from partition.costmodel import node_seconds, predict, rank_phases
from partition.machine import DEFAULT, from_dict, load, save
from partition.step_work import Workload, layers, sparse_seconds
from tests.conftest import one_error_line, run_cli

WIDE = dataclasses.replace(DEFAULT, sparse_wide_per_core=4 * DEFAULT.sparse_per_core,
                           dense_wide_per_core=2 * DEFAULT.dense_per_core)


def test_the_speedup_is_one_when_narrow_the_wide_ratio_when_wide_and_log_linear_between():
    assert WIDE.width_speedup("sparse", 16) == 1.0 and WIDE.width_speedup("sparse", 8) == 1.0
    assert WIDE.width_speedup("sparse", 128) == pytest.approx(4.0)
    assert WIDE.width_speedup("sparse", 512) == pytest.approx(4.0)  # no extrapolation past the widest measured
    assert WIDE.width_speedup("sparse", 45.25) == pytest.approx(4.0 ** (math.log(45.25 / 16) / math.log(8)))
    assert WIDE.width_speedup("dense", 128) == pytest.approx(2.0)
    assert DEFAULT.width_speedup("sparse", 128) == 1.0 and DEFAULT.width_speedup("dense", 128) == 1.0  # unmeasured


def test_wide_layers_are_priced_at_the_wide_rates_and_narrow_ones_as_before():
    part = {"inner": 10_000, "central": 10_000, "halo": 0, "edges": 80_000, "sent": 0}
    wide_plan, narrow_plan = layers(Workload(128, 16, 128, 3)), layers(Workload(16, 8, 16, 2))
    hidden = wide_plan[1]  # 128 -> 128, aggregated 128 wide
    assert sparse_seconds(part, hidden, WIDE) == pytest.approx(sparse_seconds(part, hidden, DEFAULT) / 4)
    for la in narrow_plan:
        assert sparse_seconds(part, la, WIDE) == sparse_seconds(part, la, DEFAULT)
    slow, fast = (predict([part, part], Workload(128, 16, 128, 3), m).ranks[0] for m in (DEFAULT, WIDE))
    assert fast.sparse_s < slow.sparse_s / 2 and fast.dense_s < slow.dense_s
    # the hidden layers' dense flops at half the seconds; the last (128 -> 16) between the two rates
    first, last = wide_plan[0], wide_plan[-1]
    d = [2.0 * 10_000 * la.d_in * la.d_out * (2 + (i > 0)) for i, la in enumerate(wide_plan)]
    expect = (d[0] + d[1]) / WIDE.dense_wide_per_core + d[2] / (
        DEFAULT.dense_per_core * WIDE.width_speedup("dense", math.sqrt(last.d_in * last.d_out)))
    assert first.d_in == 128 and fast.dense_s == pytest.approx(expect)
    same = [predict([part, part], Workload(16, 8, 16, 2), m).epoch_s for m in (DEFAULT, WIDE)]
    assert same[0] == same[1]  # hidden 16 everywhere: the profile's means, as before
    # the node weights of the default partition follow: a wide model's node costs less per edge
    deg = np.array([1, 10, 100])
    assert (node_seconds(deg, Workload(128, 16, 128, 3), WIDE) < node_seconds(deg, Workload(128, 16, 128, 3), DEFAULT)).all()


def test_reads_from_cache_gain_from_width_at_their_own_ratio():
    """A part whose every row stays in cache (10,000 rows read 9 times each, 128 wide: 5 MB) reads at the hot
    rate; wide, at the hot wide rate where the profile measured one, else at the cold reads' ratio."""
    part = {"inner": 10_000, "central": 10_000, "halo": 0, "edges": 80_000, "sent": 0,
            "top_reads": [9 * min(1 << j, 10_000) for j in range(15)]}
    hot = dataclasses.replace(WIDE, sparse_hot_wide_per_core=6 * DEFAULT.hot_rate)
    hidden = layers(Workload(128, 16, 128, 3))[1]
    assert sparse_seconds(part, hidden, WIDE) == pytest.approx(90_000 * 128 / DEFAULT.hot_rate / 4)
    assert sparse_seconds(part, hidden, hot) == pytest.approx(90_000 * 128 / DEFAULT.hot_rate / 6)
    assert hot.width_speedup("sparse_hot", 45.25) == pytest.approx(6.0 ** (math.log(45.25 / 16) / math.log(8)))
    assert hot.width_speedup("sparse", 128) == pytest.approx(4.0)  # reads from memory keep their own
    cold = {k: v for k, v in part.items() if k != "top_reads"}  # every read from memory: the hot rate plays no part
    assert sparse_seconds(cold, hidden, hot) == sparse_seconds(cold, hidden, WIDE)
    narrow = layers(Workload(16, 8, 16, 2))[0]
    assert sparse_seconds(part, narrow, hot) == sparse_seconds(part, narrow, DEFAULT)
    assert "128 wide from cache: sparse 25.74 G edge-columns/s" in hot.describe()
    # a hand-written profile with the wide rate from cache but no narrow one: nothing to take a ratio of
    lone = dataclasses.replace(hot, sparse_hot_per_core=0.0)
    assert lone.width_speedup("sparse_hot", 128) == lone.width_speedup("sparse", 128) == pytest.approx(4.0)


def test_profiles_carry_the_wide_rates_and_older_ones_load_without():
    data = dataclasses.asdict(WIDE)
    assert from_dict(data, "m.json") == WIDE and "128 wide: sparse" in WIDE.describe()
    old = {k: v for k, v in data.items() if k not in ("sparse_wide_per_core", "dense_wide_per_core",
                                                       "sparse_hot_wide_per_core")}
    assert from_dict(old, "old.json").width_speedup("dense", 128) == 1.0
    assert from_dict(old, "old.json").sparse_hot_wide_per_core == 0.0


def test_the_phases_sum_to_the_ranks_work_at_the_wide_rates():
    part = {"inner": 10_000, "central": 6_000, "halo": 3_000, "sent": 3_000, "edges": 80_000}
    plan = layers(Workload(128, 16, 128, 3))
    rank = predict([part, part], Workload(128, 16, 128, 3), WIDE).ranks[0]
    phases = rank_phases(part, plan, dataclasses.replace(WIDE, step_s=0.0), 1, 1, True)
    assert sum(ph.work_s + ph.overlap_s for ph in phases) == pytest.approx(rank.sparse_s + rank.dense_s + rank.elementwise_s)


def test_old_profiles_price_bit_for_bit_as_before_the_widths():
    """The shipped profile (no wide rates) prices a node by the plain counts, with no width speedup: the same floats."""
    work = Workload(128, 40, 16, 2)  # arxiv's shape
    deg = np.arange(1, 2000)
    plan = layers(work)
    sparse = sum(la.width * (1 + la.backward_sparse) for la in plan)
    dense = sum(2.0 * la.d_in * la.d_out * (2 + (i > 0)) for i, la in enumerate(plan))
    elem = sum((1 + (i > 0)) * la.d_in + 2.0 * la.d_out for i, la in enumerate(plan))  # the features: forward
    before = (deg + 1.0) * sparse / DEFAULT.sparse_per_core + (dense / DEFAULT.dense_per_core
                                                               + elem / DEFAULT.elementwise_per_core)
    assert np.array_equal(node_seconds(deg, work, DEFAULT), before)
    with pytest.raises(ValueError, match="kernel"):
        DEFAULT.width_speedup("sprase", 128)


def test_profile_machine_writes_a_profile_the_model_reads(tmp_path):
    r = run_cli("profile-machine", "--out", str(tmp_path / "m.json"), "--rows", "2000", "--repeat", "1")
    assert r.returncode == 0, r.stderr
    m = load(str(tmp_path / "m.json"))
    assert m.sparse_per_core > 0 and m.cores_per_host >= 1 and m.ranks_per_host == 0
    assert (m.sparse_hot_wide_per_core > 0) == (m.cache_bytes > 0)  # reads from cache, 128 wide, where known
    assert f"wrote {tmp_path / 'm.json'}" in r.stdout
    # refused before measuring, in one line: a folder, a missing folder, a name the profile could not keep, huge rows
    for flags, needle in ((["--out", str(tmp_path)], "is a folder"),
                          (["--out", str(tmp_path / "no" / "m.json")], "does not exist"),
                          (["--out", str(tmp_path / "n.json"), "--name", "a\nb"], "--name"),
                          (["--out", str(tmp_path / "n.json"), "--rows", str(10 ** 10)], "--rows")):
        one_error_line(run_cli("profile-machine", *flags), needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]  # nothing else written, no .tmp left


def test_profile_machine_writes_the_median_of_profiles(tmp_path):
    """--median-of measures nothing: each rate the median of the profiles given; a wide rate at their median
    ratio to the narrow one. Profiles of different hosts, a lying profile and --link are one line each."""
    files = []
    for k, (s, w) in enumerate(((1e9, 1.2e9), (2e9, 2.4e9), (4e9, 3.6e9))):
        files.append(str(tmp_path / f"p{k}.json"))
        save(dataclasses.replace(DEFAULT, sparse_per_core=s, sparse_wide_per_core=w, epoch_fixed_s=0.01 * (k + 1),
                                 epoch_fixed_ranks=4), files[-1])
    r = run_cli("profile-machine", "--median-of", *files, "--out", str(tmp_path / "m.json"))
    assert r.returncode == 0, r.stderr
    m = load(str(tmp_path / "m.json"))
    assert (m.name, m.sparse_per_core, m.epoch_fixed_s, m.epoch_fixed_ranks) == ("median of 3 profiles of default", 2e9, 0.02, 4)
    assert m.sparse_wide_per_core == pytest.approx(2.4e9) and m.dense_per_core == DEFAULT.dense_per_core
    save(dataclasses.replace(DEFAULT, cores_per_host=0.45), str(tmp_path / "other.json"))
    (tmp_path / "lie.json").write_text('{"name": "x"}')
    other = str(tmp_path / "other.json")
    for flags, needle in ((["--median-of", files[0], other], "different hosts have no median (cores a host: 0.45, 2)"),
                          (["--median-of", files[0], str(tmp_path / "lie.json")], "lacks the field"),
                          (["--median-of", files[0], str(tmp_path / "gone.json")], "cannot be read"),
                          (["--median-of", *files, "--link"], "leave out --link"),
                          (["--median-of", *files, "--rows", "5000"], "leave out --rows"),
                          (["--median-of", files[0]], "two or more distinct"),
                          (["--median-of", files[0], files[0]], "two or more distinct")):
        one_error_line(run_cli("profile-machine", *flags, "--out", str(tmp_path / "n.json")), needle)
    assert not (tmp_path / "n.json").exists()
    one_error_line(run_cli("profile-machine", "--median-of", *files, "--out", files[1]), "one of the profiles")
    assert load(files[1]).sparse_per_core == 2e9  # the input left as it was


def test_a_median_profile_keeps_its_wide_rates_within_those_measured():
    """Two profiles both measuring 1e10 wide, 1e9 and 1e10 narrow: the median ratio (5.5) times the median
    narrow rate (5.5e9) would be 3.0e10, above either: the wide rate stays at most what was measured."""
    from partition.machine import median_profile

    ps = [dataclasses.replace(DEFAULT, sparse_per_core=s, sparse_wide_per_core=1e10) for s in (1e9, 1e10)]
    assert median_profile(ps, "m").sparse_wide_per_core == 1e10
