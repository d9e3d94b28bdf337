"""The on-disk partition directory (docs/design.md §3): atomic, checksummed, memory-mappable.

A partition is written into a staging folder beside OUT and renamed into place
only when complete, so an interrupted run never leaves a half-written OUT and
an existing one is replaced only by a whole new one.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

import numpy as np

from partition.build import PartPlan
from partition.errors import DataError, PartitionFormatError, UsageError
from partition.part_counts import plan_halo_edges, plan_top_reads

FORMAT_VERSION = 1  # static graphs; 2 adds node/edge types, 3 snapshots
TYPED_VERSION = 2
SNAPSHOT_VERSION = 3
SUPPORTED_VERSIONS = (1, 2, 3)
PART_FILES = ("graph.npz", "nodes.npz", "features.npy", "labels.npy", "masks.npz", "halo.npz")
TYPED_FEATURES_FILE = "typed_features.npz"  # x_<type id>: inner rows of that type, in local order
RELAGG_FILE = "relagg.npz"  # relation-aggregation-first plans, keyed by destination
SNAPSHOT_FILE = "snapshots.npz"
EXTRA_FILES = {TYPED_VERSION: (TYPED_FEATURES_FILE, RELAGG_FILE), SNAPSHOT_VERSION: (SNAPSHOT_FILE,)}
ORIGINAL_IDS_FILE = "original_ids.npy"  # the input's id of every global id, where the loader compacted sparse ids
LINK_FILE = "link_edges.npz"  # held-out edge pairs for link prediction (--link-split)


def part_files(meta: dict) -> tuple[str, ...]:
    return PART_FILES + EXTRA_FILES.get(meta.get("format_version"), ())


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_atomic(path: Path, writer) -> None:
    """Write through a temp file and rename: a crash leaves the old file or none, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        writer(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _write_part(folder: Path, plan: PartPlan) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    graph = {"indptr": plan.indptr, "indices": plan.indices}
    if plan.edge_weight is not None:
        graph["edge_weight"] = plan.edge_weight
    if plan.edge_type is not None:
        graph["edge_type"] = plan.edge_type
    if plan.edge_attr is not None:
        graph["edge_attr"] = plan.edge_attr
    typed = {k: v for k, v in (("node_type", plan.node_type), ("rel_in_degree", plan.rel_in_degree)) if v is not None}
    write_atomic(folder / "graph.npz", lambda f: np.savez(f, **graph))
    write_atomic(folder / "nodes.npz", lambda f: np.savez(
        f, global_ids=plan.global_ids, num_inner=np.int64(plan.num_inner), num_central=np.int64(plan.num_central),
        in_degree=plan.in_degree, out_degree=plan.out_degree, in_weight=plan.in_weight,
        self_loop=plan.self_loop if plan.self_loop is not None else np.zeros(plan.global_ids.shape[0], bool), **typed))
    write_atomic(folder / "features.npy", lambda f: np.save(f, np.ascontiguousarray(plan.x, dtype=np.float32)))
    write_atomic(folder / "labels.npy", lambda f: np.save(f, plan.y))
    write_atomic(folder / "masks.npz", lambda f: np.savez(f, train=plan.train_mask, val=plan.val_mask, test=plan.test_mask))
    write_atomic(folder / "halo.npz", lambda f: np.savez(
        f, send_idx=plan.send_idx, send_counts=plan.send_counts, recv_counts=plan.recv_counts))


def check_out_dir(out: Path, force: bool) -> None:
    """Refuse to replace a non-empty OUT unless asked: a partition can take hours to make."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise UsageError(f"output directory {out} exists and is not empty (use --force to replace it)")


def write_partition(out: str | Path, meta: dict, node_map: np.ndarray, plans: Iterable[PartPlan],
                    force: bool = False, on_part=None, summarize=None, version: int = FORMAT_VERSION,
                    extras=None, root_files: dict | None = None) -> dict:
    """Write every part, then partition.json with checksums; returns the metadata written.

    `summarize(rows)` may add whole-partition figures (e.g. stats) to the metadata
    once the per-part rows are known. Versions 2 and 3 add one file per part
    (typed features, snapshot differences): `extras(k)` returns {file name: arrays}.
    """
    names = part_files({"format_version": version})
    out = Path(out)
    check_out_dir(out, force)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    except OSError as e:
        raise unwritable(out, e) from None
    try:
        write_atomic(stage / "node_map.npy", lambda f: np.save(f, node_map.astype(np.int32)))
        checksums = {"node_map.npy": sha256_file(stage / "node_map.npy")}
        for name, arrays in (root_files or {}).items():  # held-out link-prediction edges, original node ids
            write_atomic(stage / name, lambda f, a=arrays: np.save(f, a) if isinstance(a, np.ndarray) else np.savez(f, **a))
            checksums[name] = sha256_file(stage / name)
        rows = []
        for plan in plans:
            folder = stage / f"part-{plan.part}"
            _write_part(folder, plan)
            files = extras(plan.part) if version in EXTRA_FILES else {}
            for name in EXTRA_FILES.get(version, ()):
                write_atomic(folder / name, lambda f: np.savez(f, **files[name]))
            for name in names:
                checksums[f"part-{plan.part}/{name}"] = sha256_file(folder / name)
            rows.append({"inner": plan.num_inner, "halo": plan.num_halo, "central": plan.num_central,
                         "edges": plan.num_edges, "halo_edges": plan_halo_edges(plan.indices, plan.num_inner),
                         "top_reads": plan_top_reads(plan.indices, plan.num_inner, plan.num_inner + plan.num_halo)})
            if on_part is not None:
                on_part(plan)
        meta = dict(meta, format_version=version, parts=rows, sha256=checksums)
        if summarize is not None:
            meta.update(summarize(rows))
        write_atomic(stage / "partition.json", lambda f: f.write(json.dumps(meta, indent=1).encode()))
        if out.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, trash / "old")
            os.replace(stage, out)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(stage, out)
    except BaseException as e:
        shutil.rmtree(stage, ignore_errors=True)
        if isinstance(e, OSError) and e.errno is not None:  # a full disk, a quota, a read-only folder
            raise unwritable(out, e) from None
        raise
    return meta


def unwritable(out: Path, e: OSError) -> UsageError:
    """One line for a partition that could not be written (the staging folder is gone by then)."""
    where = f" ({e.filename})" if e.filename else ""
    return UsageError(f"cannot write the partition {out}: {e.strerror or e}{where}; nothing was written"
                      + (", and the existing one is unchanged" if out.exists() else ""))


def read_meta(path: str | Path) -> dict:
    """partition.json, after checking it exists, parses and has a version this reader knows."""
    path = Path(path)
    meta_file = path / "partition.json"
    if not path.is_dir():
        raise PartitionFormatError(f"partition directory {path} does not exist")
    if not meta_file.is_file():
        raise PartitionFormatError(f"{path} is not a partition directory (no partition.json)")
    try:
        meta = json.loads(meta_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PartitionFormatError(f"{meta_file} is corrupt: {e}") from None
    version = meta.get("format_version")
    if version not in SUPPORTED_VERSIONS:
        raise PartitionFormatError(f"{meta_file}: unknown format version {version!r} (this reader knows {SUPPORTED_VERSIONS})")
    for key in ("num_parts", "num_nodes", "parts", "sha256"):
        if key not in meta:
            raise PartitionFormatError(f"{meta_file} lacks the field '{key}'")
    return meta


def verify_files(path: Path, meta: dict, names: Iterable[str]) -> None:
    for name in names:
        f = path / name
        expected = meta["sha256"].get(name)
        if expected is None:
            raise PartitionFormatError(f"{path}/partition.json has no checksum for {name}")
        if not f.is_file():
            raise PartitionFormatError(f"partition file {f} is missing")
        if sha256_file(f) != expected:
            raise PartitionFormatError(f"partition file {f} fails its checksum (truncated or edited)")


def verify_partition(path: str | Path) -> dict:
    """Check every file of the directory against partition.json."""
    path = Path(path)
    meta = read_meta(path)
    verify_files(path, meta, meta["sha256"].keys())
    return meta


def read_node_map(path: str | Path, meta: dict, verify: bool = True) -> np.ndarray:
    """node_map.npy (global id -> part), memory-mapped, after its checksum."""
    path = Path(path)
    if verify:
        verify_files(path, meta, ["node_map.npy"])
    try:
        node_map = np.load(path / "node_map.npy", mmap_mode="r")
    except (OSError, ValueError) as e:
        raise PartitionFormatError(f"{path}/node_map.npy cannot be read: {e}") from None
    if node_map.shape != (int(meta["num_nodes"]),):
        raise PartitionFormatError(f"{path}/node_map.npy has {node_map.shape[0]} entries for {meta['num_nodes']} nodes")
    return node_map


def read_root_file(path: str | Path, name: str, meta: dict, verify: bool = True) -> np.ndarray | dict:
    """A file beside the parts (`LINK_FILE`, `ORIGINAL_IDS_FILE`) after its checksum: a .npy memory-mapped,
    a .npz as a dict of arrays."""
    path = Path(path)
    if verify:
        verify_files(path, meta, [name])
    try:
        if name.endswith(".npy"):
            return np.load(path / name, mmap_mode="r", allow_pickle=False)
        with np.load(path / name, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError) as e:
        raise PartitionFormatError(f"{path}/{name} cannot be read: {str(e).splitlines()[0]}") from None


def read_local_ids(path: str | Path, part: int, meta: dict, verify: bool = True) -> tuple[np.ndarray, int]:
    """(global id of every local row, number of inner rows) of one part, after its checksum."""
    path = Path(path)
    if not 0 <= part < meta["num_parts"]:
        raise DataError(f"part {part} does not exist ({meta['num_parts']} parts)")
    if verify:
        verify_files(path, meta, [f"part-{part}/nodes.npz"])
    try:
        with np.load(path / f"part-{part}" / "nodes.npz") as z:
            return z["global_ids"], int(z["num_inner"])
    except (OSError, KeyError, ValueError) as e:
        raise PartitionFormatError(f"partition part {path / f'part-{part}'} cannot be read: {e}") from None


def read_masks(path: str | Path, part: int, meta: dict, verify: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train, val, test) masks over one part's inner rows, in local order, after their checksum."""
    path = Path(path)
    if verify:
        verify_files(path, meta, [f"part-{part}/masks.npz"])
    try:
        with np.load(path / f"part-{part}" / "masks.npz") as z:
            return z["train"], z["val"], z["test"]
    except (OSError, KeyError, ValueError) as e:
        raise PartitionFormatError(f"partition part {path / f'part-{part}'} cannot be read: {e}") from None


def read_part(path: str | Path, part: int, meta: dict | None = None, verify: bool = True) -> PartPlan:
    """Load part K as numpy arrays (features memory-mapped)."""
    path = Path(path)
    meta = meta or read_meta(path)
    if not 0 <= part < meta["num_parts"]:
        raise PartitionFormatError(f"part {part} does not exist in {path} ({meta['num_parts']} parts)")
    names = [f"part-{part}/{n}" for n in part_files(meta)]
    if verify:
        verify_files(path, meta, names)
    folder = path / f"part-{part}"
    try:
        g = np.load(folder / "graph.npz")
        nodes = np.load(folder / "nodes.npz")
        masks = np.load(folder / "masks.npz")
        halo = np.load(folder / "halo.npz")
        plan = PartPlan(
            part=part,
            global_ids=nodes["global_ids"],
            num_inner=int(nodes["num_inner"]),
            num_central=int(nodes["num_central"]),
            indptr=g["indptr"],
            indices=g["indices"],
            edge_weight=g["edge_weight"] if "edge_weight" in g.files else None,
            in_degree=nodes["in_degree"],
            out_degree=nodes["out_degree"],
            in_weight=nodes["in_weight"],
            x=np.load(folder / "features.npy", mmap_mode="r"),
            y=np.load(folder / "labels.npy"),
            train_mask=masks["train"],
            val_mask=masks["val"],
            test_mask=masks["test"],
            send_idx=halo["send_idx"],
            send_counts=halo["send_counts"],
            recv_counts=halo["recv_counts"],
            self_loop=nodes["self_loop"] if "self_loop" in nodes.files else None,
            edge_type=g["edge_type"] if "edge_type" in g.files else None,
            edge_attr=g["edge_attr"] if "edge_attr" in g.files else None,
            node_type=nodes["node_type"] if "node_type" in nodes.files else None,
            rel_in_degree=nodes["rel_in_degree"] if "rel_in_degree" in nodes.files else None,
        )
    except (OSError, KeyError, ValueError) as e:
        raise PartitionFormatError(f"partition part {folder} cannot be read: {e}") from None
    _check_plan(plan, meta, folder)
    return plan


def _check_plan(plan: PartPlan, meta: dict, folder: Path) -> None:
    """Cheap consistency checks that catch a part copied from another partition."""
    p = meta["num_parts"]
    n_local = plan.global_ids.shape[0]
    if plan.send_counts.shape != (p,) or plan.recv_counts.shape != (p,):
        raise PartitionFormatError(f"{folder}/halo.npz has plans for {plan.send_counts.shape[0]} parts, partition has {p}")
    if plan.recv_counts.sum() != plan.num_halo or plan.indptr.shape[0] != plan.num_inner + 1:
        raise PartitionFormatError(f"{folder}: halo or row counts do not match nodes.npz")
    if plan.indices.size and (plan.indices.min() < 0 or plan.indices.max() >= n_local):
        raise DataError(f"{folder}/graph.npz: local source id out of range for {n_local} local rows")
    if plan.x.shape[0] != plan.num_inner or plan.y.shape[0] != plan.num_inner:
        raise PartitionFormatError(f"{folder}: features or labels do not match {plan.num_inner} inner nodes")
    if plan.num_inner != meta["parts"][plan.part]["inner"]:
        raise PartitionFormatError(f"{folder}: {plan.num_inner} inner nodes, "
                                   f"partition.json says {meta['parts'][plan.part]['inner']}")


def read_typed_features(path: str | Path, part: int, meta: dict) -> list[np.ndarray]:
    """Inner rows of each node type (in type order) of a format-2 partition, checked against partition.json."""
    f = Path(path) / f"part-{part}" / TYPED_FEATURES_FILE
    if meta.get("format_version") != TYPED_VERSION:
        raise PartitionFormatError(f"{path} does not hold a typed graph (format {meta.get('format_version')})")
    try:
        with np.load(f) as z:
            xs = [z[f"x_{t}"] for t in range(len(meta["node_types"]))]
    except (OSError, ValueError, KeyError) as e:
        raise PartitionFormatError(f"typed features {f} cannot be read: {e}") from None
    for t, (x, width) in enumerate(zip(xs, meta["feature_dims"])):
        if x.ndim != 2 or x.shape[1] != width:
            raise PartitionFormatError(f"{f}: node type '{meta['node_types'][t]}' has feature width "
                                 f"{x.shape[1] if x.ndim == 2 else x.shape}, partition.json says {width} (feature width mismatch)")  # noqa: E501
    return xs


def read_relagg(path: str | Path, part: int) -> dict:
    f = Path(path) / f"part-{part}" / RELAGG_FILE
    try:
        with np.load(f) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise PartitionFormatError(f"relation-aggregation plans {f} cannot be read: {e}") from None


def pack_ragged(chunks: list[np.ndarray], dtype) -> tuple[np.ndarray, np.ndarray]:
    """A list of 1-D arrays as (data, offsets): how per-snapshot lists are stored in snapshots.npz."""
    offsets = np.zeros(len(chunks) + 1, dtype=np.int64)
    np.cumsum([c.shape[0] for c in chunks], out=offsets[1:])
    data = np.concatenate(chunks).astype(dtype) if chunks else np.zeros(0, dtype)
    return data, offsets


def ragged_item(data: np.ndarray, offsets: np.ndarray, t: int) -> np.ndarray:
    """Item t of a list stored by `pack_ragged`."""
    return data[offsets[t]:offsets[t + 1]]


def read_snapshots(path: str | Path, part: int, meta: dict) -> dict:
    """part-K/snapshots.npz of a format-3 partition (checked by `read_part`), as a dict of arrays."""
    f = Path(path) / f"part-{part}" / SNAPSHOT_FILE
    if meta.get("format_version") != SNAPSHOT_VERSION:
        raise PartitionFormatError(f"{path} holds a static graph (format {meta.get('format_version')}), not snapshots")
    try:
        with np.load(f) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise PartitionFormatError(f"snapshot plans {f} cannot be read: {e}") from None
    if arrays["in_weight"].shape[0] != meta["num_snapshots"]:
        raise PartitionFormatError(f"{f} holds {arrays['in_weight'].shape[0]} snapshots, "
                                   f"partition.json says {meta['num_snapshots']}")
    return arrays
