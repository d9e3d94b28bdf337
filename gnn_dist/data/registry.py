"""Data set names and spec strings -> loaders, with one-line errors for anything malformed."""
from __future__ import annotations

import inspect
from typing import Callable

from gnn_dist.data import hetero, real, synthetic, temporal
from partition import edgelist
from partition.errors import PartitionError
from partition.graph import Graph
from partition.hetero import HeteroGraph
from partition.temporal import Snapshots

GENERATORS: dict[str, Callable[..., Graph]] = {"sbm": synthetic.sbm, "powerlaw": synthetic.powerlaw, "rmat": synthetic.rmat}
TEMPORAL = ("chickenpox", "england_covid")
DATASETS = ("cora", "karate", "nx:<generator>", "file:<path.npz>", *(f"{g}:key=value,..." for g in GENERATORS),
            *TEMPORAL, "json:<path.json>", "dsbm:key=value,...", "hsbm:key=value,...", "hfile:<path.npz>",
            "edges:<file, glob or folder of chunks>")


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """'sbm:nodes=10,seed=1' -> ('sbm', {'nodes': '10', 'seed': '1'})."""
    name, _, rest = spec.partition(":")
    params: dict[str, str] = {}
    if rest and name not in ("nx", "file", "json", "hfile", "edges"):
        for item in rest.split(","):
            key, eq, value = item.partition("=")
            if not eq or not key.strip() or not value.strip():
                raise PartitionError(f"malformed data set spec '{spec}': expected key=value, got '{item}'")
            params[key.strip()] = value.strip()
    return name.strip(), params


def _typed_params(fn: Callable[..., Graph], params: dict[str, str], spec: str) -> dict:
    sig = inspect.signature(fn).parameters
    out = {}
    for key, value in params.items():
        if key not in sig:
            raise PartitionError(f"data set spec '{spec}': unknown parameter '{key}' (known: {', '.join(sig)})")
        kind = type(sig[key].default)
        try:
            out[key] = kind(float(value)) if kind is int and float(value).is_integer() else kind(value)
        except ValueError:
            raise PartitionError(f"data set spec '{spec}': '{key}' must be {kind.__name__}, got '{value}'") from None
    return out


def is_temporal(spec: str) -> bool:
    name = parse_spec(spec)[0]
    return name in TEMPORAL or name in ("json", "dsbm")


def load_dataset(spec: str, data_dir: str | None = None, seed: int = 0) -> Graph | Snapshots | HeteroGraph:
    """Load by name; see DATASETS for the accepted forms. Dynamic graphs come back as `Snapshots`,
    typed ones as `HeteroGraph`."""
    name, params = parse_spec(spec)
    if name == "hsbm":
        return hetero.hsbm(**_typed_params(hetero.hsbm, params, spec))
    if name == "hfile":
        return hetero.from_npz(spec.partition(":")[2])
    if name == "edges":
        return edgelist.load_edge_list(spec.partition(":")[2])
    if name in TEMPORAL and not params:
        return temporal.load_named(name, data_dir)
    if name == "json":
        return temporal.from_json(spec.partition(":")[2])
    if name == "dsbm":
        return temporal.drifting_sbm(**_typed_params(temporal.drifting_sbm, params, spec))
    if name == "cora" and not params:
        return real.load_cora(data_dir)
    if name == "karate" and not params:
        return real.load_karate(seed)
    if name == "nx":
        gen = spec.partition(":")[2]
        if not gen:
            raise PartitionError("data set spec 'nx:' needs a networkx generator name, e.g. nx:les_miserables_graph")
        return real.load_networkx(gen, seed)
    if name == "file":
        return real.load_npz(spec.partition(":")[2])
    if name in GENERATORS:
        fn = GENERATORS[name]
        return fn(**_typed_params(fn, params, spec))
    raise PartitionError(f"unknown data set '{spec}' (known: {', '.join(DATASETS)})")
