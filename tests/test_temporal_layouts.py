"""Every PyG-Temporal JSON layout of a node-level task loads as that library's loader builds it.

Each file here is faithfully shaped (the keys and nesting of the library's own files), with small made-up
values; the expected arrays follow the library's loaders step by step (lags, standardisation, weights).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from gnn_dist.data import load_dataset
from partition.errors import DataError

T, N = 12, 5
RNG = np.random.default_rng(7)
EDGES = [[0, 1], [1, 2], [2, 3], [3, 4], [4, 0], [1, 0]]
WEIGHTS = [1.0, 2.0, 0.5, 3.0, 1.5, 2.5]
SERIES = RNG.integers(0, 50, (T, N)).astype(float)


def _write(tmp_path, name, obj) -> str:
    f = tmp_path / f"{name}.json"
    f.write_text(json.dumps(obj))
    return f"json:{f}"


def _std(a, eps=0.0):
    return (a - a.mean(axis=0)) / (a.std(axis=0) + eps)


def _check(seq, series, lags, weights=WEIGHTS):
    assert seq.num_snapshots == T - lags and seq.x.shape == (T - lags, N, lags)
    for t in range(T - lags):
        np.testing.assert_allclose(seq.x[t], series[t:t + lags].T, rtol=1e-6)
        np.testing.assert_allclose(seq.y[t], series[t + lags], rtol=1e-6)
    s = seq.snapshots[0]
    got = dict(zip(zip(s.src.tolist(), s.dst.tolist()), s.weight.tolist()))
    assert got == {tuple(e): w for e, w in zip(EDGES, weights)}


def test_pedalme_weighted_edges_raw_counts(tmp_path):
    spec = _write(tmp_path, "pedalme_london", {"edges": EDGES, "weights": WEIGHTS, "X": SERIES.tolist()})
    _check(load_dataset(spec), SERIES, 4)
    _check(load_dataset(spec + "?lags=2"), SERIES, 2)  # lags is an option, as the library's get_dataset(lags)


def test_wikivital_per_period_targets_standardised(tmp_path):
    obj = {"edges": EDGES, "weights": WEIGHTS, "time_periods": T, **{str(t): {"y": SERIES[t].tolist()} for t in range(T)}}
    _check(load_dataset(_write(tmp_path, "wikivital_mathematics", obj)), _std(SERIES), 8)


def test_windmill_block_standardised_with_epsilon(tmp_path):
    spec = _write(tmp_path, "windmill_output", {"edges": EDGES, "weights": WEIGHTS, "block": SERIES.tolist()})
    _check(load_dataset(spec), _std(SERIES, 1e-10), 8)


def test_montevideo_bus_node_link_form(tmp_path):
    stops = [f"stop{k}" for k in (17, 3, 99, 42, 5)]  # ids are names, not positions
    feats = RNG.integers(0, 9, (T, N)).astype(float)
    obj = {"directed": True, "multigraph": False, "graph": {},
           "nodes": [{"bus_stop": stops[i], "X": {"y": feats[:, i].tolist()}, "y": SERIES[:, i].tolist(), "id": i}
                     for i in range(N)],
           "links": [{"source": stops[a], "target": stops[b], "weight": w} for (a, b), w in zip(EDGES, WEIGHTS)]}
    seq = load_dataset(_write(tmp_path, "montevideo_bus", obj))
    lags, fx, ty = 4, _std(feats), _std(SERIES)
    for t in range(T - lags):
        np.testing.assert_allclose(seq.x[t], fx[t:t + lags].T, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(seq.y[t], ty[t + lags], rtol=1e-5, atol=1e-6)


def test_twitter_tennis_a_graph_per_period(tmp_path):
    periods = {}
    for t in range(T):
        edges = [[int(a), int(b)] for a, b in RNG.integers(0, N, (3 + t % 3, 2))]
        raw = np.c_[RNG.integers(0, 30, N), RNG.random(N)]  # degree, transitivity
        periods[str(t)] = {"edges": edges, "weights": [1.0] * len(edges), "X": raw.tolist(),
                           "y": RNG.integers(0, 20, N).tolist()}
    seq = load_dataset(_write(tmp_path, "twitter_tennis_rg17", {"time_periods": T, **periods}))
    assert seq.num_snapshots == T and seq.x.shape == (T, N, 16)  # 5 degree bins + 11 transitivity bins
    raw = np.asarray(periods["3"]["X"])
    deg = np.minimum(np.ceil(np.log(raw[:, 0] + 1)), 4).astype(int)
    assert np.array_equal(seq.x[3][:, :5].argmax(1), deg) and (seq.x[3].sum(1) == 2).all()
    np.testing.assert_allclose(seq.y[3], np.log1p(periods["4"]["y"]), rtol=1e-6)  # next period's mentions
    np.testing.assert_allclose(seq.y[T - 1], np.log1p(periods[str(T - 1)]["y"]), rtol=1e-6)  # the last repeats
    assert [len(s.src) for s in seq.snapshots[:3]] == [len(periods[str(t)]["edges"]) for t in range(3)]


def test_mtm_and_unknown_layouts_get_one_line(tmp_path):
    with pytest.raises(DataError, match="is MTM-1 .*graph-level task"):
        load_dataset(_write(tmp_path, "mtm_1", {"edges": EDGES, "LABEL": {"0": 1}, "0": {"0": "(1,2,3)"}}))
    with pytest.raises(DataError, match="no PyG-Temporal layout has its keys .*FX"):
        load_dataset(_write(tmp_path, "other", {"vertices": [], "arcs": []}))


def test_shipped_sets_keep_their_defaults_and_take_lags():
    assert load_dataset("chickenpox").x.shape[2] == 4 and load_dataset("england_covid").x.shape[2] == 8
    assert load_dataset("chickenpox:lags=8").x.shape[2] == 8
    with pytest.raises(DataError, match="pedalme_london.json is not in"):
        load_dataset("pedalme")
