"""Dynamic graphs: PyG-Temporal's JSON layouts and a drifting SBM.

Features and targets are built as PyTorch Geometric Temporal's loaders build
them (a window of `lags` past values per node predicts the next one, with the
same standardisation and edge weights), so results are comparable with that
library's: chickenpox (`edges`, `FX`; 4 lags), england_covid (`edge_mapping`,
`y`; 8), pedalme (`edges`, `weights`, `X`; 4), wikivital_mathematics
(`edges`, `weights`, per-period `y`; 8), windmill (`edges`, `weights`,
`block`; 8), montevideo_bus (networkx node-link `nodes`, `links`; 4) and
twitter_tennis (a graph per period; encoded features, log(1 + y) of the next
period). `lags` is an option wherever that library takes it
(`json:PATH?lags=N`). MTM-1 is a graph-level task and is refused.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gnn_dist.data.paths import find_data
from partition.dynamic import Snapshots
from partition.errors import DataError, UsageError


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


def _standardise(series: np.ndarray, eps: float = 0.0) -> np.ndarray:
    """Per node over time, as PyG-Temporal's loaders do (some add 1e-10 to the deviation, some do not)."""
    return (series - series.mean(axis=0)) / (series.std(axis=0) + eps)


def _check_periods(d: dict, path: Path) -> None:
    """`time_periods`, where a layout states it, must match every per-period list and the periods stored:
    reading fewer would drop data silently, and reading more fails deep in a loader."""
    if "time_periods" not in d:
        return
    try:
        stated = int(d["time_periods"])
    except (TypeError, ValueError):
        raise DataError(f"dynamic graph file {path}: time_periods is {d['time_periods']!r}, not a count") from None
    held = {f"'{k}'": len(d[k]) for k in ("FX", "X", "y", "block") if isinstance(d.get(k), list)}
    if isinstance(d.get("edge_mapping"), dict):
        held.update({f"'edge_mapping.{k}'": len(v) for k, v in d["edge_mapping"].items() if isinstance(v, dict)})
    periods = sum(k.isdigit() for k in d)
    if periods:
        held["the file"] = periods
    for what, count in held.items():
        if count != stated:
            raise DataError(f"dynamic graph file {path}: time_periods is {stated} but {what} holds {count} periods")


def _check_weights(edges: list, weights: list, where: str) -> None:
    if len(weights) != len(edges):
        raise DataError(f"{where}: 'weights' has {len(weights)} entries for {len(edges)} edges")


def _static(d: dict, series: np.ndarray, lags: int, name: str, weighted: bool = True) -> Snapshots:
    """One edge list for every snapshot, x_t = lags of the series, y_t = its next value."""
    if weighted:
        _check_weights(d["edges"], d["weights"], f"dynamic graph {name}")
    x, y = _lagged(series, lags, name)
    weights = [d["weights"]] * len(x) if weighted else None
    return Snapshots.from_lists([d["edges"]] * len(x), weights, x, y, series.shape[1], name=name)


def _montevideo(d: dict, lags: int, name: str) -> Snapshots:
    """networkx node-link form: nodes with 'bus_stop', 'y' and X['y']; links with source, target, weight."""
    index = {node["bus_stop"]: i for i, node in enumerate(d["nodes"])}
    edges = [(index[link["source"]], index[link["target"]]) for link in d["links"]]
    feats = _standardise(_series([node["X"]["y"] for node in d["nodes"]], name).T)
    targets = _standardise(_series([node["y"] for node in d["nodes"]], name).T)
    x, _ = _lagged(feats, lags, name)
    _, y = _lagged(targets, lags, name)
    weights = [[link["weight"] for link in d["links"]]] * len(x)
    return Snapshots.from_lists([edges] * len(x), weights, x, y, feats.shape[1], name=name)


def _encode_tennis(raw: np.ndarray, cutoff: int = 4) -> np.ndarray:
    """Twitter-tennis features (degree, transitivity) one-hot encoded as that library's default does."""
    degree = np.minimum(np.ceil(np.log(raw[:, 0] + 1.0)), cutoff).astype(np.int64)
    trans = np.floor(raw[:, 1] * 10).astype(np.int64)
    return np.concatenate([np.eye(cutoff + 1)[degree], np.eye(11)[trans]], axis=1)


def _tennis(d: dict, name: str) -> Snapshots:
    """Per-period edges, weights, X and y; the target is log(1 + y) of the next period (the last repeats)."""
    t_max = int(d["time_periods"])
    periods = [d[str(t)] for t in range(t_max)]
    for t, p in enumerate(periods):
        _check_weights(p["edges"], p["weights"], f"dynamic graph {name}, period {t}")
    x = [_encode_tennis(np.asarray(p["X"], np.float64)) for p in periods]
    y = [np.log1p(np.asarray(periods[min(t + 1, t_max - 1)]["y"], np.float64)) for t in range(t_max)]
    return Snapshots.from_lists([p["edges"] for p in periods], [p["weights"] for p in periods], x, y, x[0].shape[0],
                                name=name)


def from_json(path: str | Path, lags: int | None = None, name: str | None = None) -> Snapshots:
    """Every PyG-Temporal JSON layout of a node-level task, told apart by its keys (module docstring)."""
    path = Path(path)
    d = _read_json(path)
    name = name or path.stem
    if not isinstance(d, dict):
        raise DataError(f"dynamic graph file {path} holds a JSON {type(d).__name__}, not an object of named fields")
    try:
        _check_periods(d, path)
        if "FX" in d:  # Chickenpox: static unweighted edges, raw counts
            return _static(d, _series(d["FX"], name) if d["FX"] else np.zeros((0, 0)), lags or 4, name, False)
        if "edge_mapping" in d:  # England Covid: edges per day, standardised targets
            series = _series(d["y"], name) if d["y"] else np.zeros((0, 0))
            x, y = _lagged(_standardise(series, 1e-10), lags or 8, name)
            em = d["edge_mapping"]
            edges = [em["edge_index"][str(t)] for t in range(len(x))]
            weights = [em["edge_weight"][str(t)] for t in range(len(x))]
            return Snapshots.from_lists(edges, weights, x, y, series.shape[1], name=name)
        if "X" in d and "edges" in d:  # PedalMe: weighted static edges, raw counts
            return _static(d, _series(d["X"], name), lags or 4, name)
        if "block" in d:  # Windmill output: standardised with 1e-10
            return _static(d, _standardise(_series(d["block"], name), 1e-10), lags or 8, name)
        if "nodes" in d and "links" in d:  # Montevideo bus
            return _montevideo(d, lags or 4, name)
        if "time_periods" in d and "edges" in d:  # WikiVital mathematics: per-period visits, standardised
            rows = [d[str(t)]["y"] for t in range(int(d["time_periods"]))]
            return _static(d, _standardise(_series(rows, name)), lags or 8, name)
        if "time_periods" in d and "edges" in d.get("0", {}):  # Twitter tennis: a graph per period
            return _tennis(d, name)
        if "LABEL" in d:
            raise DataError(f"dynamic graph file {path} is MTM-1 (one class per window of frames, a graph-level "
                            f"task); gnn-dist trains node-level tasks")
    except KeyError as e:
        raise DataError(f"dynamic graph file {path} lacks the key {e}") from None
    raise DataError(f"dynamic graph file {path}: no PyG-Temporal layout has its keys ({', '.join(list(d)[:6])}); "
                    f"expected e.g. 'edges' and 'FX' (chickenpox), 'edge_mapping' (england_covid), 'X' (pedalme), "
                    f"'block' (windmill), 'nodes' and 'links' (montevideo_bus), 'time_periods' (wikivital, tennis)")


# PyG-Temporal's data sets by name -> the file its loader fetches (chickenpox and england_covid are shipped;
# put the others in datasets/temporal/ or under --data-dir ROOT/temporal/).
NAMED = {"chickenpox": "chickenpox.json", "england_covid": "england_covid.json", "pedalme": "pedalme_london.json",
         "wikivital_mathematics": "wikivital_mathematics.json", "windmill": "windmill_output.json",
         "montevideo_bus": "montevideo_bus.json", "twitter_tennis": "twitter_tennis_rg17.json"}


def load_named(name: str, data_dir: str | None = None, lags: int | None = None) -> Snapshots:
    """A PyG-Temporal data set by name, from its JSON file in the data roots' `temporal/` folder."""
    folder = find_data("temporal", data_dir)
    f = folder / NAMED[name]
    if not f.is_file():
        raise DataError(f"{name}: {NAMED[name]} is not in {folder} (copy it from PyG-Temporal's dataset/ folder "
                        f"there, or read any such file with json:PATH)")
    return from_json(f, lags, name=name)


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
