"""Data set names and spec strings -> loaders, with one-line errors for anything malformed."""
from __future__ import annotations

import inspect
from typing import Callable

from gnn_dist.data import dynamic, npz, ogb, pyg, real, synthetic, typed
from gnn_dist.data.options import flag, note, number, split_spec
from partition import edgelist, metis_file
from partition.dynamic import Snapshots
from partition.errors import DataError, UsageError
from partition.graph import Graph
from partition.typed import TypedGraph

GENERATORS: dict[str, Callable[..., Graph]] = {"sbm": synthetic.sbm, "powerlaw": synthetic.powerlaw, "rmat": synthetic.rmat,
                                               "grid": synthetic.grid}
DYNAMIC = tuple(dynamic.NAMED)
# Every form a --dataset may take: (form, kind of graph, what it needs on disk, what it is). `gnn-dist datasets`
# prints this; docs/datasets.md describes each form (a test keeps the two in step).
CATALOGUE = (
    ("cora", "static", "shipped (datasets/cora)", "Cora, Planetoid split 140/500/1000, read by PyG's Planetoid"),
    ("karate", "static", "nothing (PyG ships it)", "Zachary's karate club, 4 classes"),
    ("nx:<generator>", "static", "nothing (networkx)", "a networkx classic graph; labels: modularity communities"),
    ("file:<path.npz>[?lcc=..&split=..&val=..&seed=..&binary=..]", "static", "the .npz file",
     "your graph: the project's npz layout, or the gnn-benchmark layout (PyG's Amazon, Coauthor, CitationFull)"),
    ("edges:<file|glob|folder>[?reverse=..&nodes=..&relabel=..]", "static",
     "edge list chunks (.csv/.tsv/.txt/.npy/.npz, .gz/.bz2)",
     "an edge list, no features or labels (training gives nodes learnable rows); sparse ids compacted"),
    ("metis:<path.graph[.gz|.bz2]>", "static", "the METIS/Chaco file", "a METIS graph, weights optional"),
    ("pyg:<DatasetClass>[:<name>][?target=..&split=..&seed=..]", "static or typed",
     "the data set's raw files under --data-dir, in PyG's layout", "any torch_geometric data set, never downloaded"),
    ("ogb:<ogbn-name>[?reverse=..&node_features=..]", "static or typed",
     "OGB's folder for the set under --data-dir, in OGB's layout",
     "ogbn-arxiv, -products, -proteins (ROC-AUC), -papers100M, -mag (typed) with OGB's split; features memory-mapped"),
    ("sbm:key=value,...", "static", "nothing (seeded)", "stochastic block model with class-correlated features"),
    ("powerlaw:key=value,...", "static", "nothing (seeded)", "Chung-Lu power-law graph"),
    ("rmat:key=value,...", "static", "nothing (seeded)", "R-MAT graph, 2^scale nodes, skewed degrees"),
    ("grid:key=value,...", "static", "nothing (seeded)",
     "2-D or 3-D lattice (a mesh), classes in bands, ids optionally shuffled"),
    ("hfile:<path.npz>[?split=..&val=..&seed=..&target=..]", "typed", "the .npz file",
     "your typed graph: x:<type>, edge_index:<src:rel:dst>, target, y"),
    ("hsbm:key=value,...", "typed", "nothing (seeded)", "typed SBM: papers (target), authors, venues"),
    ("chickenpox", "dynamic", "shipped (datasets/temporal)", "Hungarian counties, 517 weekly snapshots, regression"),
    ("england_covid", "dynamic", "shipped (datasets/temporal)", "English regions, daily mobility, regression"),
    ("json:<path.json>[?lags=..]", "dynamic", "the PyG-Temporal JSON file",
     "a dynamic graph in any PyG-Temporal JSON layout (chickenpox, england_covid, pedalme, wikivital, windmill, "
     "montevideo_bus, twitter_tennis)"),
    ("pedalme|wikivital_mathematics|windmill|montevideo_bus|twitter_tennis[:lags=..]", "dynamic",
     "the data set's JSON file in datasets/temporal (not shipped)", "PyG-Temporal's data sets by name"),
    ("dsbm:key=value,...", "dynamic", "nothing (seeded)", "drifting SBM: nodes change community each step"),
)
DATASETS = tuple(form for form, *_ in CATALOGUE)
PATH_FORMS = ("nx", "file", "json", "hfile", "edges", "metis", "pyg", "ogb")  # the rest after ':' is a path (with ?options)


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """'sbm:nodes=10,seed=1' -> ('sbm', {'nodes': '10', 'seed': '1'})."""
    name, _, rest = spec.partition(":")
    params: dict[str, str] = {}
    if rest and name not in PATH_FORMS:
        for item in rest.split(","):
            key, eq, value = item.partition("=")
            if not eq or not key.strip() or not value.strip():
                raise DataError(f"malformed data set spec '{spec}': expected key=value, got '{item}'")
            params[key.strip()] = value.strip()
    return name.strip(), params


def _typed_params(fn: Callable[..., Graph], params: dict[str, str], spec: str) -> dict:
    sig = inspect.signature(fn).parameters
    out = {}
    for key, value in params.items():
        if key not in sig:
            raise UsageError(f"data set spec '{spec}': unknown parameter '{key}' (known: {', '.join(sig)})")
        kind = type(sig[key].default)
        try:
            out[key] = kind(float(value)) if kind is int and float(value).is_integer() else kind(value)
        except ValueError:
            raise UsageError(f"data set spec '{spec}': '{key}' must be {kind.__name__}, got '{value}'") from None
    return out


def _lags(lags: int = 0) -> None:
    """The parameters a named dynamic data set takes (for _typed_params)."""


def is_dynamic(spec: str) -> bool:
    name = parse_spec(spec)[0]
    return name in DYNAMIC or name in ("json", "dsbm")


def _edges(rest: str, spec: str) -> Graph:
    """`edges:PATH?reverse=&nodes=&relabel=`, with a note when sparse ids were compacted."""
    path, options = split_spec(rest, spec, ("reverse", "nodes", "relabel"))
    nodes = number(options, "nodes", spec)
    if nodes is not None and nodes < 1:
        raise UsageError(f"data set spec '{spec}': 'nodes' must be at least 1, got {nodes}")
    g = edgelist.load_edge_list(path, nodes, flag(options, "reverse", spec), flag(options, "relabel", spec, True))
    if g.original_ids is not None:
        note(f"edge list '{path}': node ids up to {int(g.original_ids[-1])} for {g.num_nodes} distinct nodes, "
             f"relabelled 0..{g.num_nodes - 1} in id order; the partition keeps the original ids "
             f"(original_ids.npy) and predict writes them beside its output (?relabel=false refuses instead)")
    return g


def load_dataset(spec: str, data_dir: str | None = None, seed: int = 0) -> Graph | Snapshots | TypedGraph:
    """Load by name; see DATASETS for the accepted forms. Dynamic graphs come back as `Snapshots`,
    typed ones as `TypedGraph`."""
    name, params = parse_spec(spec)
    if name == "hsbm":
        return typed.hsbm(**_typed_params(typed.hsbm, params, spec))
    rest = spec.partition(":")[2]
    if name == "hfile":
        return typed.from_npz(rest, seed, spec)
    if name == "edges":
        return _edges(rest, spec)
    if name == "ogb":
        return ogb.load_ogb(rest, data_dir, seed, spec)
    if name == "pyg":
        return pyg.load_pyg(rest, data_dir, seed, spec)
    if name == "metis":
        return metis_file.load_metis(split_spec(rest, spec, ())[0])
    if name in DYNAMIC:
        unknown = set(params) - {"lags"}
        if unknown:
            raise UsageError(f"data set spec '{spec}': unknown parameter '{unknown.pop()}' (known: lags)")
        return dynamic.load_named(name, data_dir, _typed_params(_lags, params, spec).get("lags"))
    if name == "json":
        path, options = split_spec(rest, spec, ("lags",))
        return dynamic.from_json(path, number(options, "lags", spec))
    if name == "dsbm":
        return dynamic.drifting_sbm(**_typed_params(dynamic.drifting_sbm, params, spec))
    if name == "cora" and not params:
        return real.load_cora(data_dir)
    if name == "karate" and not params:
        return real.load_karate(seed)
    if name == "nx":
        gen = spec.partition(":")[2]
        if not gen:
            raise DataError("data set spec 'nx:' needs a networkx generator name, e.g. nx:les_miserables_graph")
        return real.load_networkx(gen, seed)
    if name == "file":
        return npz.load_npz(rest, seed, spec)
    if name in GENERATORS:
        fn = GENERATORS[name]
        return fn(**_typed_params(fn, params, spec))
    raise UsageError(f"unknown data set '{spec}' (known: {', '.join(DATASETS)})")
