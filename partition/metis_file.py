"""METIS / Chaco graph files (`metis:PATH`, optionally .gz or .bz2) -> a Graph, checked line by line.

The format: '%' lines are comments; the header is `n m [fmt [ncon]]`, where fmt's digits say whether
vertex sizes, vertex weights and edge weights follow (e.g. 001: edge weights, 011: both weights);
then one line per vertex listing its neighbours, 1-based, each followed by its edge weight when fmt
says so. m counts undirected edges, each listed from both ends. Vertex weights and sizes are read and
dropped (gnn-dist balances its own constraints). Anything that does not fit this shape is refused
with one line naming the line and what was expected: never read as a different graph.
"""
from __future__ import annotations

import bz2
import gzip
from pathlib import Path

import numpy as np

from partition.errors import DataError
from partition.graph import Graph

OPENERS = {".gz": gzip.open, ".bz2": bz2.open}


def _data_lines(f: Path):
    """(line number, stripped line) of every non-comment line; vertex lines may be empty (no neighbours)."""
    with OPENERS.get(f.suffix, open)(f, "rt") as fh:
        for number, line in enumerate(fh, 1):
            if not line.startswith("%"):
                yield number, line.strip()


def _header(f: Path, number: int, line: str) -> tuple[int, int, bool, int]:
    """(n, m, edge weights?, values before the neighbours per vertex line)."""
    fields = line.split()
    if not 2 <= len(fields) <= 4 or not all(x.isdigit() for x in fields):
        raise DataError(f"METIS file {f}, line {number}: expected the header 'n m [fmt [ncon]]', got '{line[:60]}'")
    n, m = int(fields[0]), int(fields[1])
    fmt = fields[2].zfill(3) if len(fields) > 2 else "000"
    if len(fmt) != 3 or set(fmt) - {"0", "1"}:
        raise DataError(f"METIS file {f}, line {number}: fmt must be three 0/1 digits, got '{fields[2]}'")
    ncon = int(fields[3]) if len(fields) > 3 else 1
    return n, m, fmt[2] == "1", int(fmt[0] == "1") + (ncon if fmt[1] == "1" else 0)


def load_metis(path: str) -> Graph:
    f = Path(path)
    if not f.is_file():
        raise DataError(f"METIS file {f} does not exist")
    try:
        lines = _data_lines(f)
        first = next(((k, ln) for k, ln in lines if ln), None)
        if first is None:
            raise DataError(f"METIS file {f} is empty")
        n, m, weighted, lead = _header(f, *first)
        src, dst, w = [], [], []
        v = 0
        for number, line in lines:
            if v == n:
                if line:
                    raise DataError(f"METIS file {f}, line {number}: more vertex lines than the header's {n}")
                continue
            vals = np.array(line.split(), dtype=np.float64) if line else np.zeros(0)
            body = vals[lead:]
            if weighted and body.shape[0] % 2:
                raise DataError(f"METIS file {f}, line {number}: neighbour and weight pairs expected (fmt says "
                                f"edge weights), got {body.shape[0]} values")
            nbrs = body[0::2] if weighted else body
            if nbrs.size and (nbrs.min() < 1 or nbrs.max() > n or not np.all(nbrs == np.floor(nbrs))):
                raise DataError(f"METIS file {f}, line {number}: neighbour ids must be integers in 1..{n}")
            src.append(nbrs.astype(np.int64) - 1)
            dst.append(np.full(nbrs.shape[0], v, np.int64))
            if weighted:
                w.append(body[1::2].astype(np.float32))
            v += 1
    except DataError:
        raise
    except (OSError, EOFError, UnicodeDecodeError, ValueError) as e:
        raise DataError(f"METIS file {f} cannot be read: {str(e).splitlines()[0]}") from None
    if v != n:
        raise DataError(f"METIS file {f}: the header says {n} vertices but {v} vertex lines follow")
    src_a, dst_a = np.concatenate(src or [np.zeros(0, np.int64)]), np.concatenate(dst or [np.zeros(0, np.int64)])
    if src_a.shape[0] != 2 * m:
        raise DataError(f"METIS file {f}: the header says {m} edges ({2 * m} adjacency entries) but the lines list "
                        f"{src_a.shape[0]}")
    none = np.zeros(n, bool)
    return Graph.from_edges(src_a, dst_a, n, np.zeros((n, 0), np.float32), np.full(n, -1, np.int64), none, none,
                            none, edge_weight=np.concatenate(w) if weighted else None, name=f.name.split(".")[0])
