"""What one core computes per second, as the cost model counts it: sparse products (from memory, from cache,
and per output row), dense products, elementwise passes and a training step's fixed cost, each timed on one
thread with the kernels training uses, at sizes like a layer's (`gnn-dist profile-machine`'s rates)."""
from __future__ import annotations

import time

from partition.machine import WIDE


def median_of(fn, repeat: int) -> float:
    """The median of `repeat` calls after one warm-up: the rate a kernel keeps inside a training step. (The
    fastest call would be the kernel alone, faster than training ever runs it beside its other ranks: tried
    on 2026-12-05, it predicted every local row of docs/benchmarks.md's table far too fast. Against other
    jobs on a shared host, take the profile and the run under one lock instead.)"""
    fn()
    times = []
    for _ in range(repeat):
        calls, t = 0, time.perf_counter()
        while not calls or time.perf_counter() - t < _SAMPLE_S[0]:  # under a CPU quota: many of its periods
            fn()
            calls += 1
        times.append((time.perf_counter() - t) / calls)
    return sorted(times)[len(times) // 2]


def sample_s() -> float:
    """How long one timed sample runs: one call, or, under a CPU quota, calls for 20 of its periods (a call
    shorter than the quota's slice would run unthrottled, and its rate over the quota's fraction would be
    too fast by up to 1 / the fraction)."""
    from gnn_dist.runtime.cgroups import cpu_quota, cpu_quota_period_s

    return 20 * cpu_quota_period_s() if cpu_quota() is not None else 0.0


_SAMPLE_S = [0.0]  # set by `set_sample_s` (profile-machine's measure): read once, not per call


def set_sample_s(seconds: float) -> None:
    _SAMPLE_S[0] = seconds


# (input, output) widths timed: GCN's layers at the default hidden 16 and at 128, narrow and wide; the last is
# also the profile's wide rates (partition.machine.WIDE)
WIDTHS = ((32, 16), (16, 8), (128, 16), (16, 128), (128, 128))


def cache_bytes() -> int:
    """This host's last-level cache (0 where the OS does not say: every read priced cold). A part whose rows
    fit its share of it reads them there; what no longer fits comes from memory at the random-column rate."""
    from pathlib import Path

    sizes = {}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            if (index / "type").read_text().strip() != "Instruction":
                size = (index / "size").read_text().strip().upper()
                unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
                sizes[int((index / "level").read_text())] = int(size.rstrip("KMG")) * unit
        except (OSError, ValueError):
            continue
    return sizes[max(sizes)] if sizes else 0


def per_core(rates: dict, fraction: float) -> dict:
    """Rates one thread measured under a quota of `fraction` of a core (< 1: a throttled thread runs that share
    of the wall time) as a whole core's, so that the model, pricing the host at its fraction, counts it once.
    Each timed sample spans 20 of the quota's periods (`sample_s`), so throttling averages out."""
    out = {k: v / fraction if k.endswith("_per_core") else v for k, v in rates.items()}
    out["step_s"] = rates["step_s"] * fraction
    return out


def compute_rates(rows: int, repeat: int, sharing: int = 1) -> dict:
    """Sparse edge-columns, dense flops and elementwise values per second on one thread, each kernel as a
    training step runs it: fresh outputs, the dense products of forward and backward, the mean over widths;
    the sparse product from memory and from cache (`sparse_rates`), `sharing` ranks timed at once; and the
    WIDE-wide dense product and elementwise pass on operands that fit a rank's cache share (a small part's
    layer, which the `rows`-row operands, larger than the cache, would price too slow)."""
    import torch

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    cache = cache_bytes()
    try:
        sparse, hot, one_edge, dense, elem = [], [], [], [], []
        for d_in, d_out in WIDTHS:
            cold_rate, hot_rate = sparse_rates(rows, d_in, cache // sharing, repeat)
            sparse.append(cold_rate)
            hot.append(hot_rate)
            one_edge.append(sparse_rates(rows, d_in, cache // sharing, repeat, degree=1, cold=False)[1])
            dense.append(dense_rate(rows, d_in, d_out, repeat))
            elem.append(elementwise_rate(torch.randn(rows, d_in), repeat))
        fit = (cache // sharing) // (2 * WIDE * 4)  # rows whose WIDE-wide operand takes half a rank's cache share
        in_cache = {"dense_cached_per_core": dense_rate(fit, WIDE, WIDE, repeat),
                    "elementwise_cached_per_core": elementwise_rate(torch.randn(fit, WIDE), repeat)} if fit >= 64 else {}
    finally:
        torch.set_num_threads(threads)
    cold_rate, hot_rate, row_rate = split_row_cost(_harmonic(sparse), _harmonic(hot), _harmonic(one_edge), 10)
    wide = WIDTHS.index((WIDE, WIDE))  # a wide layer's rates: the means above are the narrow widths' (harmonic)
    return {"sparse_per_core": cold_rate, "sparse_hot_per_core": hot_rate, "cache_bytes": float(cache),
            "sparse_row_per_core": row_rate,
            "sparse_wide_per_core": cold_rate * sparse[wide] / _harmonic(sparse), "dense_wide_per_core": dense[wide],
            **({"sparse_hot_wide_per_core": hot_rate * hot[wide] / _harmonic(hot)} if cache else {}),
            "dense_per_core": _harmonic(dense), "elementwise_per_core": _harmonic(elem), "step_s": step_seconds(repeat),
            **in_cache}


def dense_rate(rows: int, d_in: int, d_out: int, repeat: int) -> float:
    """Flops per second of a layer's dense products on `rows` rows, forward and both gradients."""
    import torch

    x, w, g = torch.randn(rows, d_in), torch.randn(d_in, d_out), torch.randn(rows, d_out)
    return 6.0 * rows * d_in * d_out / median_of(lambda: (x @ w, x.t() @ g, g @ w.t()), repeat)


def elementwise_rate(x, repeat: int) -> float:
    """Values per second of the passes the cost model counts as elementwise, as a step runs them: dropout
    (training's hashed mask, forward and backward) and a bias (added forward, summed backward). Four
    passes over x; x + b and ReLU alone ran 2.4x faster than the dropout kernel here, so the rate of
    plain passes priced a step's elementwise work too cheap."""
    import torch

    from gnn_dist.nn.dropout import dropout
    from gnn_dist.runtime import streams

    b, g = torch.randn(x.shape[1]), torch.randn_like(x)
    leaf = x.clone().requires_grad_(True)

    def passes() -> tuple:
        leaf.grad = None
        dropout(leaf, 0.5, True).backward(g)
        return (x + b, g.sum(0))

    streams.begin(0, 0, 0)
    try:
        return 4 * x.numel() / median_of(passes, repeat)
    finally:
        streams.end()


def split_row_cost(cold: float, hot: float, one_edge: float, degree: int) -> tuple[float, float, float]:
    """(cold and hot edge rates without the per-row work, the per-row rate) from products of `degree` edges a
    row (`cold`, `hot`: edge-columns per second) and of one edge a row from cache (`one_edge`). Per
    row-column, t1 = e + r and t_degree = degree e + r (e an edge's seconds, r the row's): r = (degree t1 -
    t_degree) / (degree - 1). Where noise makes r come out negative, the row rate is 0 (not measured) and
    the edge rates stay as measured, the row's work folded in."""
    t1, t_many = 1.0 / one_edge, degree / hot
    row_s = (degree * t1 - t_many) / (degree - 1)
    if row_s <= 0 or row_s / degree >= min(1.0 / cold, 1.0 / hot):
        return cold, hot, 0.0
    return 1.0 / (1.0 / cold - row_s / degree), 1.0 / (1.0 / hot - row_s / degree), 1.0 / row_s


def sparse_rates(rows: int, width: int, share: int, repeat: int, degree: int = 10,
                 cold: bool = True) -> tuple[float, float]:
    """Edge-columns per second of `rows` output rows of `degree` random columns each, `width` wide: the
    columns among rows twice the cache `share` (each read from memory), and among rows a quarter of it (each
    read from cache, as a power-law graph's hubs or a small part's rows; a quarter leaves room for the
    streams the product also reads and writes, which at a full share evict rows). Without a known cache,
    both cold. `cold=False`: the second only (the first 0)."""
    import warnings

    import torch

    from gnn_dist.graph.local import spmm

    crow = torch.arange(0, rows * degree + 1, degree, dtype=torch.int64)

    def rate(among: int) -> float:
        col = torch.randint(0, among, (rows * degree,), dtype=torch.int64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's note that sparse CSR is in beta
            a = torch.sparse_csr_tensor(crow, col, torch.rand(rows * degree), (rows, among))
        x = torch.randn(among, width)
        return rows * degree * width / median_of(lambda: spmm(a, x), repeat)

    row_bytes = 4 * width
    from_memory = rate(max(rows, 2 * share // row_bytes)) if cold or not share else 0.0
    return from_memory, (rate(max(1, share // 4 // row_bytes)) if share else from_memory)


def step_seconds(repeat: int) -> float:
    """A GCN training step on a graph too small to weigh anything (a 20 x 20 grid), on one thread: the
    fixed cost of every step (Python, autograd, the optimiser, small tensors)."""
    import torch
    import torch.nn.functional as F

    from gnn_dist.data.synthetic import grid
    from gnn_dist.graph.local import LocalGraph
    from gnn_dist.nn.models import build_model
    from gnn_dist.runtime import streams

    g = LocalGraph.from_graph(grid(width=20, height=20, features=16))
    model = build_model("gcn", g.num_features, 16, int(g.y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def step() -> None:
        streams.begin(0, 0, 0)
        try:
            opt.zero_grad()
            loss = F.cross_entropy(model(g.x, g)[g.train_mask], g.y[g.train_mask])
            loss.backward()
            opt.step()
        finally:
            streams.end()

    try:
        return median_of(lambda: [step() for _ in range(10)], repeat) / 10
    finally:
        torch.set_num_threads(threads)


def _harmonic(rates: list[float]) -> float:
    """The rate at which equal work at each width would run: the harmonic mean."""
    return len(rates) / sum(1.0 / r for r in rates)
