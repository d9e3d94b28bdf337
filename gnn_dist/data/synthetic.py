"""Seeded generators with known structure, for graphs of any size.

SBM: communities are the classes, `homophily` is the fraction of edges
inside a class, features are a class mean plus unit noise. Power-law
(Chung-Lu): skewed degrees, the case that stresses balance and halo size.
"""
from __future__ import annotations

import numpy as np

from partition.errors import DataError, UsageError
from partition.graph import Graph


def _masks(n: int, rng: np.random.Generator, train: float, val: float, test: float) -> tuple[np.ndarray, ...]:
    if min(train, val, test) < 0 or train + val + test > 1 + 1e-9:
        raise UsageError("train/val/test fractions must be >= 0 and sum to at most 1")
    perm = rng.permutation(n)
    cuts = np.round(np.cumsum([train, val, test]) * n).astype(np.int64)
    masks = [np.zeros(n, bool) for _ in range(3)]
    masks[0][perm[: cuts[0]]] = True
    masks[1][perm[cuts[0]: cuts[1]]] = True
    masks[2][perm[cuts[1]: cuts[2]]] = True
    return tuple(masks)


def _class_features(y: np.ndarray, classes: int, features: int, signal: float, rng: np.random.Generator) -> np.ndarray:
    means = rng.standard_normal((classes, features), dtype=np.float32)
    x = rng.standard_normal((y.shape[0], features), dtype=np.float32)
    x += np.float32(signal) * means[y]
    return x


def _undirected(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Drop self loops and repeats, then store each pair both ways."""
    keep = src != dst
    lo, hi = np.minimum(src[keep], dst[keep]), np.maximum(src[keep], dst[keep])
    key = np.unique(lo * n + hi)
    lo, hi = key // n, key % n
    return np.concatenate([lo, hi]), np.concatenate([hi, lo])


def sbm(nodes: int = 1000, classes: int = 8, avg_degree: float = 10.0, homophily: float = 0.8,
        features: int = 32, signal: float = 0.3, train: float = 0.1, val: float = 0.1, test: float = 0.8,
        seed: int = 0) -> Graph:
    """Stochastic block model, classes = blocks; avg_degree counts in-edges per node."""
    if nodes < 2 or classes < 1 or classes > nodes or avg_degree <= 0 or not 0 <= homophily <= 1 or features < 1:
        raise DataError("sbm needs nodes >= 2, 1 <= classes <= nodes, avg_degree > 0, 0 <= homophily <= 1, features >= 1")
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(nodes, dtype=np.int64) % classes)
    by_class = np.argsort(y, kind="stable")
    size = np.bincount(y, minlength=classes)
    start = np.concatenate(([0], np.cumsum(size)[:-1]))
    m = int(round(nodes * avg_degree / 2))
    src = rng.integers(0, nodes, m)
    target = y[src].copy()
    if classes > 1:
        other = rng.random(m) >= homophily
        target[other] = (target[other] + rng.integers(1, classes, int(other.sum()))) % classes
    dst = by_class[start[target] + (rng.random(m) * size[target]).astype(np.int64)]
    s, d = _undirected(src, dst, nodes)
    x = _class_features(y, classes, features, signal, rng)
    return Graph.from_edges(s, d, nodes, x, y, *_masks(nodes, rng, train, val, test),
                            name=f"sbm-{nodes}", num_classes=classes)


def powerlaw(nodes: int = 1000, avg_degree: float = 10.0, exponent: float = 2.5, classes: int = 8,
             features: int = 32, signal: float = 0.3, train: float = 0.1, val: float = 0.1, test: float = 0.8,
             seed: int = 0) -> Graph:
    """Chung-Lu graph: P(edge u-v) proportional to w_u * w_v with power-law weights."""
    if nodes < 2 or avg_degree <= 0 or exponent <= 2 or classes < 1 or features < 1:
        raise DataError("powerlaw needs nodes >= 2, avg_degree > 0, exponent > 2, classes >= 1, features >= 1")
    rng = np.random.default_rng(seed)
    w = (np.arange(nodes) + 1.0) ** (-1.0 / (exponent - 1.0))
    cdf = np.cumsum(w / w.sum())
    m = int(round(nodes * avg_degree / 2))
    perm = rng.permutation(nodes)  # so high degree is not tied to low ids
    src = perm[np.minimum(np.searchsorted(cdf, rng.random(m)), nodes - 1)]
    dst = perm[np.minimum(np.searchsorted(cdf, rng.random(m)), nodes - 1)]
    s, d = _undirected(src, dst, nodes)
    y = rng.integers(0, classes, nodes)
    x = _class_features(y, classes, features, signal, rng)
    return Graph.from_edges(s, d, nodes, x, y, *_masks(nodes, rng, train, val, test),
                            name=f"powerlaw-{nodes}", num_classes=classes)


def rmat(scale: int = 16, edges: int = 500_000, a: float = 0.57, b: float = 0.19, c: float = 0.19,
         classes: int = 8, features: int = 16, signal: float = 0.3, train: float = 0.1, val: float = 0.1,
         test: float = 0.8, seed: int = 0) -> Graph:
    """R-MAT (Chakrabarti et al.): 2^scale nodes, `edges` directed edges after symmetrising
    (about edges / 2 pairs drawn), recursive quadrant probabilities a, b, c, 1 - a - b - c.

    Node ids are shuffled so that the heavy ids are not all small. Drawn in
    chunks, so the generator itself never holds more than the edge list.
    """
    d = 1.0 - a - b - c
    if scale < 2 or scale > 40 or edges < 1 or min(a, b, c, d) < 0:
        raise DataError("rmat needs 2 <= scale <= 40, edges >= 1 and a, b, c >= 0 with a + b + c <= 1")
    rng = np.random.default_rng(seed)
    n = 1 << scale
    pairs = edges // 2
    src, dst = np.empty(pairs, np.int64), np.empty(pairs, np.int64)
    for lo in range(0, pairs, 1 << 21):
        k = min(1 << 21, pairs - lo)
        s, t = np.zeros(k, np.int64), np.zeros(k, np.int64)
        for _ in range(scale):
            u = rng.random(k)
            s = (s << 1) | (u >= a + b)
            t = (t << 1) | (((u >= a) & (u < a + b)) | (u >= a + b + c))
        src[lo:lo + k], dst[lo:lo + k] = s, t
    perm = rng.permutation(n)
    s, t = _undirected(perm[src], perm[dst], n)
    y = rng.integers(0, classes, n)
    x = _class_features(y, classes, features, signal, rng)
    return Graph.from_edges(s, t, n, x, y, *_masks(n, rng, train, val, test), name=f"rmat-{scale}",
                            num_classes=classes)


GRID_BYTES_PER_NODE = 512  # the build's peak above the features (measured 3-D, 16 features: 433 bytes a node in all)


def _check_room(what: str, nodes: int, bytes_per_node: int) -> None:
    """Refuse, in one line and before allocating, a graph whose build would not fit in the memory available."""
    from partition.memory import available_bytes

    if nodes > 2**40:
        raise DataError(f"{what}: {nodes} nodes is more than 2^40")
    room, source = available_bytes()
    need = nodes * bytes_per_node
    if room is not None and need > room:
        raise DataError(f"{what}: {nodes} nodes need about {need / 2**30:.1f} GiB to build, more than the "
                        f"{room / 2**30:.1f} GiB available ({source})")


def grid(width: int = 100, height: int = 100, depth: int = 1, classes: int = 8, features: int = 16,
         signal: float = 0.3, shuffle: int = 0, train: float = 0.1, val: float = 0.1, test: float = 0.8,
         seed: int = 0) -> Graph:
    """A 2-D (depth 1) or 3-D lattice, each point joined to its axis neighbours: a mesh, where every node has
    the same degree (4 or 6 inside), so node counts and work agree and METIS finds short boundaries.

    Classes are bands along the first axis, so labels follow locality as a simulation's fields would.
    Ids run along the first axis unless `shuffle=1`, which permutes them (contiguous ranges then stop
    following locality; the graph is the same).
    """
    if min(width, height, depth) < 1 or width * height * depth < 2 or classes < 1 or features < 1:
        raise DataError("grid needs width, height, depth >= 1 (at least 2 points), classes >= 1, features >= 1")
    if shuffle not in (0, 1):
        raise DataError(f"grid: shuffle must be 0 or 1, got {shuffle}")
    n = width * height * depth
    _check_room("grid", n, GRID_BYTES_PER_NODE + 4 * features)
    rng = np.random.default_rng(seed)
    shape = (width, height, depth)
    ids = np.arange(n, dtype=np.int64).reshape(shape, order="F")  # the first axis varies fastest
    src, dst = [], []
    for axis in range(3):
        lo = [slice(None)] * 3
        hi = [slice(None)] * 3
        lo[axis], hi[axis] = slice(0, -1), slice(1, None)
        src.append(ids[tuple(lo)].ravel())
        dst.append(ids[tuple(hi)].ravel())
    s, d = np.concatenate(src), np.concatenate(dst)
    perm = rng.permutation(n) if shuffle else np.arange(n, dtype=np.int64)
    s, d = _undirected(perm[s], perm[d], n)
    band = (np.arange(n) % width) * min(classes, width) // width  # class by position along the first axis
    y = np.empty(n, np.int64)
    y[perm] = band
    x = _class_features(y, classes, features, signal, rng)
    kind = "2d" if depth == 1 else "3d"
    return Graph.from_edges(s, d, n, x, y, *_masks(n, rng, train, val, test), name=f"grid-{kind}-{n}",
                            num_classes=classes)
