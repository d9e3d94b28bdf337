"""Real graphs: Cora (shipped files, read by PyG's Planetoid), KarateClub and networkx classics."""
from __future__ import annotations

import shutil

import numpy as np

from gnn_dist.data.options import seeded_split
from gnn_dist.data.paths import cache_dir, find_data
from partition.errors import DataError
from partition.graph import Graph

CORA_FILES = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")


def graph_from_pyg(data, name: str = "graph", num_classes: int = 0) -> Graph:
    """A PyG `Data` object as a Graph; missing labels become -1 and missing masks all-False."""
    src, dst = (t.numpy() for t in data.edge_index)
    n = int(data.num_nodes)
    masks = [getattr(data, m, None) for m in ("train_mask", "val_mask", "test_mask")]
    masks = [np.zeros(n, bool) if m is None else m.numpy() for m in masks]
    y = data.y.numpy() if getattr(data, "y", None) is not None else np.full(n, -1)
    if y.ndim == 2 and y.shape[1] == 1:  # one label per node stored as a column (OGB's layout)
        y = y[:, 0]
    w = data.edge_weight.numpy() if getattr(data, "edge_weight", None) is not None else None
    ea = data.edge_attr.numpy() if getattr(data, "edge_attr", None) is not None else None
    return Graph.from_edges(src, dst, n, data.x.numpy(), y, *masks, edge_weight=w, edge_attr=ea,
                            name=name, num_classes=num_classes)


def load_cora(data_dir: str | None = None) -> Graph:
    """Cora with the public Planetoid split (140/500/1000), via torch_geometric's own loader."""
    from torch_geometric.datasets import Planetoid

    src = find_data("cora", data_dir)
    root = cache_dir() / "planetoid"
    raw = root / "Cora" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for suffix in CORA_FILES:
        f = src / f"ind.cora.{suffix}"
        if not f.is_file():
            raise DataError(f"Cora file {f} is missing")
        if not (raw / f.name).exists() or (raw / f.name).stat().st_size != f.stat().st_size:
            shutil.copyfile(f, raw / f.name)
    ds = Planetoid(str(root), "Cora")
    return graph_from_pyg(ds[0], "cora", ds.num_classes)


def load_karate(seed: int = 0) -> Graph:
    """Zachary's karate club as PyG ships it (34 nodes, 4 classes); PyG's 4 train nodes, the rest split val/test."""
    from torch_geometric.datasets import KarateClub

    data = KarateClub()[0]
    g = graph_from_pyg(data, "karate", 4)
    rest = np.flatnonzero(~g.train_mask)
    rest = np.random.default_rng(seed).permutation(rest)
    g.val_mask[rest[: len(rest) // 2]] = True
    g.test_mask[rest[len(rest) // 2:]] = True
    return g


def networkx_classics() -> list[str]:
    """networkx's social and small named graphs whose generators take no arguments (what `nx:NAME` loads)."""
    import inspect

    import networkx as nx

    names = []
    for module in (nx.generators.social, nx.generators.small):
        for name in getattr(module, "__all__", []):
            try:
                params = inspect.signature(getattr(module, name)).parameters.values()
            except (TypeError, ValueError):
                continue
            if all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
                names.append(name)
    return names


def load_networkx(name: str, seed: int = 0) -> Graph:
    """A networkx classic graph by generator name; labels are its greedy-modularity communities."""
    import networkx as nx

    gen = getattr(nx, name, None) or getattr(nx.generators, name, None)
    if gen is None or not callable(gen):
        raise DataError(f"networkx has no graph generator '{name}'; ones that take no arguments: "
                        f"{', '.join(networkx_classics())}")
    try:
        g = gen()
    except TypeError:
        raise DataError(f"networkx generator '{name}' needs arguments; use one that takes none") from None
    g = nx.convert_node_labels_to_integers(nx.Graph(g))
    n = g.number_of_nodes()
    comms = nx.community.greedy_modularity_communities(g)
    y = np.zeros(n, dtype=np.int64)
    for c, members in enumerate(comms):
        y[list(members)] = c
    edges = np.array(list(g.edges()), dtype=np.int64).reshape(-1, 2)
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    x = np.eye(n, dtype=np.float32)
    return Graph.from_edges(src, dst, n, x, y, *seeded_split(y, "0.6,0.2", seed), name=f"nx:{name}", num_classes=len(comms))
