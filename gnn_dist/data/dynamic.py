"""Dynamic graphs: the PyG Temporal JSON layouts (Chickenpox, England Covid) and a drifting SBM.

Features and targets are built exactly as PyTorch Geometric Temporal's
`ChickenpoxDatasetLoader` and `EnglandCovidDatasetLoader` build them (a
window of `lags` past values per node predicts the next one), so results are
comparable with that library's.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gnn_dist.data.paths import find_data
from partition.dynamic import Snapshots
from partition.errors import DataError, UsageError

DEFAULT_LAGS = {"static": 4, "dynamic": 8}


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise DataError(f"dynamic graph file {path} does not exist")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"dynamic graph file {path} is not valid JSON: {e}") from None


def _lagged(series: np.ndarray, lags: int, name: str) -> tuple[list, list]:
    """x_t = series[t : t + lags].T, y_t = series[t + lags]."""
    steps = series.shape[0] - lags
    if lags < 1:
        raise UsageError(f"{name}: lags must be >= 1, got {lags}")
    if steps < 1:
        raise DataError(f"{name}: {series.shape[0]} time periods leave no snapshot after {lags} lags "
                             "(the snapshot sequence is empty)")
    return [series[t:t + lags].T for t in range(steps)], [series[t + lags] for t in range(steps)]


def _series(rows: list, name: str) -> np.ndarray:
    widths = {len(r) for r in rows}
    if len(widths) > 1:
        first = len(rows[0])
        t = next(i for i, r in enumerate(rows) if len(r) != first)
        raise DataError(f"{name}: time period {t} has {len(rows[t])} nodes, period 0 has {first} "
                             "(node counts must not differ)")
    return np.asarray(rows, dtype=np.float64)


def from_json(path: str | Path, lags: int | None = None, name: str | None = None) -> Snapshots:
    """Either layout: static edges + `FX` (Chickenpox) or per-period `edge_mapping` + `y` (England Covid)."""
    path = Path(path)
    d = _read_json(path)
    name = name or path.stem
    try:
        if "FX" in d:
            series = _series(d["FX"], name) if d["FX"] else np.zeros((0, 0))
            x, y = _lagged(series, lags or DEFAULT_LAGS["static"], name)
            edges = [d["edges"]] * len(x)
            return Snapshots.from_lists(edges, None, x, y, series.shape[1], name=name)
        if "edge_mapping" in d:
            series = _series(d["y"], name) if d["y"] else np.zeros((0, 0))
            series = (series - series.mean(axis=0)) / (series.std(axis=0) + 1e-10)
            x, y = _lagged(series, lags or DEFAULT_LAGS["dynamic"], name)
            em = d["edge_mapping"]
            edges = [em["edge_index"][str(t)] for t in range(len(x))]
            weights = [em["edge_weight"][str(t)] for t in range(len(x))]
            return Snapshots.from_lists(edges, weights, x, y, series.shape[1], name=name)
    except KeyError as e:
        raise DataError(f"dynamic graph file {path} lacks the key {e}") from None
    raise DataError(f"dynamic graph file {path}: expected keys 'edges' and 'FX', or 'edge_mapping' and 'y'")


def load_named(name: str, data_dir: str | None = None) -> Snapshots:
    """`chickenpox` or `england_covid`, from the shipped copy."""
    return from_json(find_data("temporal", data_dir) / f"{name}.json", name=name)


def drifting_sbm(nodes: int = 2000, communities: int = 4, snapshots: int = 10, avg_degree: float = 10.0,
                 homophily: float = 0.8, drift: float = 0.05, features: int = 16, signal: float = 0.5,
                 seed: int = 0) -> Snapshots:
    """Communities that move: each step a `drift` fraction of nodes joins a random community and
    rewires; every other edge persists. Task: the node's community at each step.

    Features are the community mean (scaled by `signal`) plus unit noise, so a
    model has to pool neighbours (and time) to classify well.
    """
    if nodes < communities or communities < 2 or snapshots < 1 or not 0 <= drift <= 1 or not 0 <= homophily <= 1:
        raise DataError("drifting SBM: need nodes >= communities >= 2, snapshots >= 1, 0 <= drift, homophily <= 1")
    rng = np.random.default_rng(seed)
    means = rng.standard_normal((communities, features)).astype(np.float32)
    comm = rng.integers(0, communities, nodes)
    pairs = int(nodes * avg_degree / 2)

    def draw(src: np.ndarray) -> np.ndarray:
        order = np.argsort(comm, kind="stable")
        starts = np.searchsorted(comm[order], np.arange(communities + 1))
        c = comm[src]
        size = starts[c + 1] - starts[c]
        inside = order[starts[c] + (rng.random(src.shape[0]) * size).astype(np.int64)]
        return np.where(rng.random(src.shape[0]) < homophily, inside, rng.integers(0, nodes, src.shape[0]))

    a = rng.integers(0, nodes, pairs)
    b = draw(a)
    edges, xs, ys = [], [], []
    for t in range(snapshots):
        if t:
            moved = rng.random(nodes) < drift
            comm = np.where(moved, rng.integers(0, communities, nodes), comm)
            gone = moved[a] | moved[b]
            a_new = rng.choice(np.flatnonzero(moved), int(gone.sum())) if moved.any() else a[gone]
            a, b = np.concatenate([a[~gone], a_new]), np.concatenate([b[~gone], draw(a_new)])
        keep = a != b
        key = np.unique(np.minimum(a[keep], b[keep]) * nodes + np.maximum(a[keep], b[keep]))
        lo, hi = key // nodes, key % nodes
        edges.append(np.stack([np.concatenate([lo, hi]), np.concatenate([hi, lo])], axis=1))
        xs.append(signal * means[comm] + rng.standard_normal((nodes, features)).astype(np.float32))
        ys.append(comm.copy())
    return Snapshots.from_lists(edges, None, xs, ys, nodes, task="classification", num_classes=communities,
                                name=f"dsbm-{nodes}")
