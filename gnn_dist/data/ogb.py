"""`ogb:<name>`: OGB node-property data sets from a local OGB root, in OGB's own layout, with OGB's split.

Read without the `ogb` package (importing it starts a thread that contacts a package index). The root
is `--data-dir ROOT` (or a data root's `ogb/` folder), holding OGB's folder for the set, e.g.
`ROOT/ogbn_arxiv/`: `raw/edge.csv.gz`, `raw/node-feat.csv.gz`, `raw/node-label.csv.gz`,
`raw/num-node-list.csv.gz`, and `split/<kind>/{train,valid,test}.csv.gz`; ogbn-papers100M keeps
`raw/data.npz` and `raw/node-label.npz` instead of the CSV files. Edges are taken as OGB's loader
takes them (ogbn-products and ogbn-proteins add every edge's reverse; `?reverse=true` does so for any
set). ogbn-proteins has 112 binary tasks and no node features (nodes get learnable rows in training, or
`?node_features=edge_mean|edge_sum` makes them from edge features as PyG's examples do), and is scored by
ROC-AUC as OGB's evaluator scores it. ogbn-mag is a typed graph; its authors, institutions and fields have
no features, and get learnable rows in training.

Features stream, a block of rows at a time, into a float32 memory-mapped file in the cache folder and
are never held twice: the graph's `x` is that map (papers100M's are about 57 GB, more than this
machine holds). A second load of the same files reuses the map.
"""
from __future__ import annotations

import gzip
import hashlib
import zipfile
from pathlib import Path

import numpy as np

from gnn_dist.data.options import flag, split_spec
from gnn_dist.data.paths import cache_dir, data_dirs
from partition.errors import DataError, UsageError
from partition.graph import Graph
from partition.typed import TypedGraph, parse_edge_type

# OGB's master table, for the node-property sets: split folder, whether its loader adds reverse edges,
# whether the raw files are binary.
SETS = {"ogbn-arxiv": ("time", False, False), "ogbn-products": ("sales_ranking", True, False),
        "ogbn-papers100M": ("time", False, True), "ogbn-proteins": ("species", True, False),
        "ogbn-mag": ("time", False, False)}
BLOCK_ROWS = 1 << 16


def _folder(name: str, data_dir: str | None) -> Path:
    sub = name.replace("-", "_")
    roots = [Path(data_dir)] if data_dir else [r / "ogb" for r in data_dirs(None)]
    for root in roots:
        if (root / sub).is_dir():
            return root / sub
    raise DataError(f"ogb:{name}: OGB's folder {sub}/ is not in {', '.join(str(r) for r in roots)} (point --data-dir "
                    f"at the OGB root that holds it; gnn-dist never downloads)")


def _need(path: Path, name: str) -> Path:
    if not path.is_file():
        raise DataError(f"ogb:{name}: {path.name} is missing from {path.parent}")
    return path


def _csv_blocks(path: Path, dtype, name: str):
    """Blocks of rows of a gzip CSV without header, as 2-D arrays."""
    try:
        with gzip.open(path, "rt") as fh:
            while True:
                lines = [ln for _, ln in zip(range(BLOCK_ROWS), fh)]
                if not lines:
                    return
                yield np.loadtxt(lines, delimiter=",", dtype=dtype, ndmin=2)
    except (OSError, EOFError, ValueError) as e:
        raise DataError(f"ogb:{name}: {path} cannot be read: {str(e).splitlines()[0]}") from None


def _csv(path: Path, dtype, name: str) -> np.ndarray:
    blocks = list(_csv_blocks(path, dtype, name))
    return np.concatenate(blocks) if blocks else np.zeros((0, 1), dtype)


def _feature_map(key: str, n: int, width: int, blocks) -> np.ndarray:
    """Rows from `blocks` written into a float32 memory map in the cache, once; read-only afterwards."""
    f = cache_dir() / "ogb" / f"{key}-{n}x{width}.f32"
    done = f.with_suffix(".done")
    if not done.exists():
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(".tmp")
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, width))
        row = 0
        for block in blocks:
            out[row: row + block.shape[0]] = block
            row += block.shape[0]
        if row != n:
            raise DataError(f"{key}: {row} feature rows for {n} nodes")
        out.flush()
        del out
        tmp.replace(f)
        done.touch()
    return np.load(f, mmap_mode="r")


def _npy_header(fh) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, Fortran order, dtype) of the .npy stream `fh`, which is left at the first byte of data."""
    version = np.lib.format.read_magic(fh)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    return read(fh)


def _npz_blocks(npz: Path, member: str, name: str):
    """Rows of one array inside an .npz (stored or deflated), a block at a time."""
    with zipfile.ZipFile(npz) as z, z.open(f"{member}.npy") as fh:
        shape, fortran, dtype = _npy_header(fh)
        if fortran or len(shape) != 2:
            raise DataError(f"ogb:{name}: {npz.name}/{member} is not a C-ordered 2-D array")
        for start in range(0, shape[0], BLOCK_ROWS):
            rows = min(BLOCK_ROWS, shape[0] - start)
            yield np.frombuffer(fh.read(rows * shape[1] * dtype.itemsize), dtype=dtype).reshape(rows, shape[1])


def _npz_shape(npz: Path, member: str) -> tuple[int, ...]:
    with zipfile.ZipFile(npz) as z, z.open(f"{member}.npy") as fh:
        return _npy_header(fh)[0]


def _read_csv_set(raw: Path, name: str, key: str):
    n = int(_csv(_need(raw / "num-node-list.csv.gz", name), np.int64, name).sum())
    edges = _csv(_need(raw / "edge.csv.gz", name), np.int64, name)
    if name == "ogbn-proteins":  # no node features in OGB's files: see `_edge_feature_nodes`
        x = np.zeros((n, 0), np.float32)
    else:
        with gzip.open(_need(raw / "node-feat.csv.gz", name), "rt") as fh:
            width = len(fh.readline().split(","))
        x = _feature_map(key, n, width, _csv_blocks(raw / "node-feat.csv.gz", np.float32, name))
    y = _csv(_need(raw / "node-label.csv.gz", name), np.float64, name)
    return n, edges[:, 0], edges[:, 1], x, y


def _read_binary_set(raw: Path, name: str, key: str):
    data, labels = _need(raw / "data.npz", name), _need(raw / "node-label.npz", name)
    try:
        n, width = _npz_shape(data, "node_feat")
        x = _feature_map(key, n, width, _npz_blocks(data, "node_feat", name))
        with np.load(data) as z:
            src, dst = z["edge_index"]
        with np.load(labels) as z:
            y = z["node_label"]
    except DataError:
        raise
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as e:  # an empty or truncated file
        raise DataError(f"ogb:{name}: {data} or {labels.name} cannot be read: {str(e).splitlines()[0]}") from None
    return n, src, dst, x, y


def _edge_feature_nodes(raw: Path, n: int, dst: np.ndarray, how: str, name: str) -> np.ndarray:
    """ogbn-proteins' node features as PyG's examples make them: each node's incoming edge features, summed
    or averaged (`?node_features=edge_sum|edge_mean`), over the edges OGB's loader gives (both directions)."""
    feat = _csv(_need(raw / "edge-feat.csv.gz", name), np.float32, name)
    e = feat.shape[0]
    if e * 2 != dst.shape[0]:
        raise DataError(f"ogb:{name}: edge-feat.csv.gz has {e} rows for {dst.shape[0] // 2} edges")
    x = np.zeros((n, feat.shape[1]), np.float64)
    for c in range(feat.shape[1]):  # an edge's features reach both ends: it and its reverse
        x[:, c] = np.bincount(dst[:e], feat[:, c], minlength=n) + np.bincount(dst[e:], feat[:, c], minlength=n)
    if how == "edge_mean":
        x /= np.maximum(np.bincount(dst, minlength=n), 1)[:, None]
    return x.astype(np.float32)


def _header_row(path: Path, name: str) -> dict[str, str]:
    """A CSV of one header row (node type names) and one value row, as OGB's per-type tables are."""
    with gzip.open(_need(path, name), "rt") as fh:
        head, values = fh.readline().strip().split(","), fh.readline().strip().split(",")
    if len(head) != len(values):
        raise DataError(f"ogb:{name}: {path.name} has {len(head)} names and {len(values)} values")
    return dict(zip(head, values))


def _read_typed_set(folder: Path, name: str, key: str, split: str, reverse: bool) -> TypedGraph:
    """ogbn-mag's layout: per-type counts, per-relation folders, features and labels per type, split per type.
    Types and relations in OGB's order (sorted); `reverse` adds each relation's reverse as `rev_<rel>` (PyG's
    ToUndirected names). Types without a node-feat file (authors, institutions, fields) have no features."""
    raw = folder / "raw"
    counts = {t: int(c) for t, c in sorted(_header_row(raw / "num-node-dict.csv.gz", name).items())}
    with gzip.open(_need(raw / "triplet-type-list.csv.gz", name), "rt") as fh:
        triplets = sorted(tuple(ln.strip().split(",")) for ln in fh if ln.strip())
    edges = {}
    for h, r, t in triplets:
        e = _csv(_need(raw / "relations" / f"{h}___{r}___{t}" / "edge.csv.gz", name), np.int64, name)
        edges[f"{h}:{r}:{t}"] = (e[:, 0], e[:, 1])
        if reverse:
            edges[f"{t}:rev_{r}:{h}"] = (e[:, 1], e[:, 0])
    x = {}
    for t, n in counts.items():
        f = raw / "node-feat" / t / "node-feat.csv.gz"
        if not f.is_file():
            x[t] = np.zeros((n, 0), np.float32)
            continue
        with gzip.open(f, "rt") as fh:
            width = len(fh.readline().split(","))
        x[t] = _feature_map(f"{key}-{t}", n, width, _csv_blocks(f, np.float32, name))
    labelled = [t for t, v in _header_row(raw / "nodetype-has-label.csv.gz", name).items() if v.strip() == "True"]
    if len(labelled) != 1:
        raise DataError(f"ogb:{name}: expected one labelled node type, nodetype-has-label.csv.gz names {labelled}")
    target = labelled[0]
    y = _csv(_need(raw / "node-label" / target / "node-label.csv.gz", name), np.int64, name).reshape(-1)
    masks = _split_masks(folder / "split" / split / target, counts[target], name)
    return TypedGraph(list(counts), counts, x, [parse_edge_type(k) for k in edges], edges, target, y, *masks,
                      name=name)


def _split_masks(folder: Path, n: int, name: str) -> list[np.ndarray]:
    masks = []
    for part in ("train", "valid", "test"):
        idx = _csv(_need(folder / f"{part}.csv.gz", name), np.int64, name).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise DataError(f"ogb:{name}: {folder.name}/{part}.csv.gz holds node id {int(idx.max())} of {n}")
        m = np.zeros(n, bool)
        m[idx] = True
        masks.append(m)
    return masks


def load_ogb(rest: str, data_dir: str | None = None, seed: int = 0, spec: str | None = None) -> Graph | TypedGraph:
    spec = spec or f"ogb:{rest}"
    name, options = split_spec(rest, spec, ("reverse", "node_features"))
    if name not in SETS:
        raise UsageError(f"unknown OGB node-property set '{name}' (known: {', '.join(SETS)})")
    how = options.get("node_features")
    if how is not None and (name != "ogbn-proteins" or how not in ("edge_sum", "edge_mean")):
        raise UsageError(f"{spec}: node_features=edge_sum|edge_mean applies to ogbn-proteins (got '{how}' for {name})")
    split, inverse, binary = SETS[name]
    folder = _folder(name, data_dir)
    stamp = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in sorted((folder / "raw").rglob("*"))]
    key = f"{name}-{hashlib.sha1(repr(stamp).encode()).hexdigest()[:12]}"  # a new copy of the files, a new map
    if name == "ogbn-mag":
        return _read_typed_set(folder, name, key, split, flag(options, "reverse", spec))
    n, src, dst, x, y = (_read_binary_set if binary else _read_csv_set)(folder / "raw", name, key)
    if inverse or flag(options, "reverse", spec):
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    if how is not None:
        x = _edge_feature_nodes(folder / "raw", n, dst, how, name)
    y = np.asarray(y, np.float64)
    y = y.reshape(-1) if y.ndim == 1 or y.shape[1] == 1 else y  # (N, T) with T > 1: a binary label per task
    if y.shape[0] != n:
        raise DataError(f"ogb:{name}: {y.shape[0]} labels for {n} nodes")
    if y.ndim == 2:
        labels, classes = y.astype(np.float32), y.shape[1]
    else:
        labels = np.where(np.isnan(y), -1, y).astype(np.int64)  # papers100M: NaN marks an unlabelled node
        classes = int(labels.max()) + 1
    masks = _split_masks(folder / "split" / split, n, name)
    graph = Graph.from_edges(src, dst, n, x, labels, *masks, name=name, num_classes=classes)
    graph.metric = "rocauc" if name == "ogbn-proteins" else None  # OGB's evaluator for proteins
    return graph
