"""Edge lists in chunked files (CSV/TSV text, .npy (E, 2), .npz with src/dst) -> a CSR Graph.

Two passes over the chunks: the first counts in-degrees, the second drops
each chunk's edges into their rows. Only the CSR and one chunk are in memory
at any time, so a graph whose edge list does not fit twice can still be
partitioned. Lines starting with '#' and a non-numeric header are skipped.
"""
from __future__ import annotations

import glob
from pathlib import Path
from typing import Iterator

import numpy as np

from partition.errors import DataError
from partition.graph import Graph

SUFFIXES = (".csv", ".tsv", ".txt", ".npy", ".npz", ".edges")


def chunk_files(spec: str) -> list[Path]:
    p = Path(spec)
    files = sorted(f for f in p.iterdir() if f.suffix in SUFFIXES) if p.is_dir() else [Path(f) for f in sorted(glob.glob(spec))]
    if not files:
        raise DataError(f"edge list '{spec}': no files found (a file, a glob, or a folder of {', '.join(SUFFIXES)})")
    return files


def read_chunk(f: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        if f.suffix == ".npy":
            a = np.load(f)
            return a[:, 0].astype(np.int64), a[:, 1].astype(np.int64)
        if f.suffix == ".npz":
            with np.load(f) as z:
                return z["src"].astype(np.int64), z["dst"].astype(np.int64)
        with open(f) as fh:
            first = next((ln for ln in fh if ln.strip() and not ln.startswith("#")), "")
        delim = "," if "," in first else None
        header = int(not first.strip().split(delim)[0].strip().lstrip("-").isdigit())
        a = np.loadtxt(f, delimiter=delim, comments="#", dtype=np.int64, usecols=(0, 1), skiprows=header, ndmin=2)
        return a[:, 0], a[:, 1]
    except (OSError, ValueError, KeyError, IndexError) as e:
        raise DataError(f"edge list chunk {f} cannot be read: {str(e).splitlines()[0]}") from None


def read_chunks(files: list[Path]) -> Iterator[tuple[Path, np.ndarray, np.ndarray]]:
    """Each chunk in turn, checked for negative ids."""
    for f in files:
        src, dst = read_chunk(f)
        if src.size and min(src.min(), dst.min()) < 0:
            raise DataError(f"edge list chunk {f}: negative node id {int(min(src.min(), dst.min()))}")
        yield f, src, dst


def load_edge_list(spec: str, num_nodes: int | None = None) -> Graph:
    files = chunk_files(spec)
    n = num_nodes or 0
    deg = np.zeros(n, np.int64)
    for f, src, dst in read_chunks(files):  # pass 1: in-degree of every node
        top = int(max(src.max(), dst.max())) + 1 if src.size else 0
        if num_nodes and top > num_nodes:
            raise DataError(f"edge list chunk {f}: node id {top - 1} is out of range for {num_nodes} nodes")
        if top > deg.shape[0]:
            deg = np.concatenate([deg, np.zeros(top - deg.shape[0], np.int64)])
        deg += np.bincount(dst, minlength=deg.shape[0])
    n = deg.shape[0]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(deg, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), np.int64)
    fill = indptr[:-1].copy()
    for _, src, dst in read_chunks(files):  # pass 2: place each edge in its row
        order = np.argsort(dst, kind="stable")
        d, s = dst[order], src[order]
        starts = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
        rank = np.arange(d.shape[0]) - np.repeat(starts, np.diff(np.r_[starts, d.shape[0]]))
        indices[fill[d] + rank] = s
        fill[d[starts]] += np.diff(np.r_[starts, d.shape[0]])
    none = np.zeros(n, bool)
    return Graph(indptr, indices, np.zeros((n, 0), np.float32), np.full(n, -1, np.int64), none, none, none,
                 name=Path(spec).stem or "edges")
