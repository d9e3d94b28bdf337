"""Edge lists in chunked files (CSV/TSV text, .npy (E, 2), .npz with src/dst) -> a CSR Graph.

Two passes over the chunks: the first counts in-degrees, the second drops
each chunk's edges into their rows. Only the CSR and one chunk are in memory
at any time, so a graph whose edge list does not fit twice can still be
partitioned. Text chunks may be gzip or bzip2 compressed (`.gz`, `.bz2`).
Lines starting with '#' or '%' and a non-numeric header are skipped; every
data line must have the same number of columns (the first two are the
edge), so a METIS graph file, whose lines list whole neighbourhoods, is
refused with a pointer to `metis:` rather than misread. `reverse=True` adds
every edge's reverse and merges duplicates, for lists that store one
direction (OGB's).
"""
from __future__ import annotations

import bz2
import glob
import gzip
import warnings
from pathlib import Path
from typing import Iterator

import numpy as np

from partition.errors import DataError
from partition.graph import Graph
from partition.memory import available_bytes
from partition.node_ids import NodeIds

SUFFIXES = (".csv", ".tsv", ".txt", ".npy", ".npz", ".edges")
COMPRESSED = {".gz": gzip.open, ".bz2": bz2.open}
SAMPLE_LINES = 200  # lines checked for a consistent column count


def base_suffix(f: Path) -> str:
    """'.csv' for x.csv, x.csv.gz and x.csv.bz2."""
    return Path(f.stem).suffix if f.suffix in COMPRESSED else f.suffix


def open_text(f: Path):
    return COMPRESSED.get(f.suffix, open)(f, "rt")


def chunk_files(spec: str) -> list[Path]:
    p = Path(spec)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if base_suffix(f) in SUFFIXES)
    else:
        files = [Path(f) for f in sorted(glob.glob(spec))]
    if not files:
        raise DataError(f"edge list '{spec}': no files found (a file, a glob, or a folder of {', '.join(SUFFIXES)}, "
                        f"optionally .gz or .bz2)")
    return files


def _text_layout(f: Path) -> tuple[str | None, int] | None:
    """(delimiter, raw lines to skip: through the header, comments before it included), or None for a chunk
    without data lines; refuses files whose lines are not one edge each."""
    if base_suffix(f) in (".graph", ".metis", ".chaco"):
        raise DataError(f"edge list chunk {f} looks like a METIS graph file: read it with metis:{f}")
    with open_text(f) as fh:
        lines, first = [], 0  # first: the raw line number of the first line that is not a comment or blank
        for i, ln in enumerate(fh):
            if ln.strip() and not ln.lstrip().startswith(("#", "%")):
                first = i if not lines else first
                lines.append(ln)
                if len(lines) == SAMPLE_LINES:
                    break
    delim = "," if lines and "," in lines[0] else None
    header = int(bool(lines) and not lines[0].strip().split(delim)[0].strip().lstrip("-").isdigit())
    if len(lines) == header:  # empty, comments only, or a header alone
        return None
    widths = [len(ln.strip().split(delim)) for ln in lines[header:]]
    if widths and (min(widths) < 2 or max(widths) != min(widths)):
        k = next(i for i, w in enumerate(widths) if w != widths[0] or w < 2)
        raise DataError(f"edge list chunk {f}: data lines have {widths[0]} and {widths[k]} columns; edges: reads one "
                        f"'src dst' pair per line (a METIS graph file? read it with metis:{f})")
    return delim, first + 1 if header else 0  # loadtxt's skiprows counts comment lines too


def _ids(a: np.ndarray, f: Path) -> np.ndarray:
    """A column of node ids as int64, refusing what is not a non-negative integer instead of truncating it."""
    if np.issubdtype(a.dtype, np.floating):
        bad = ~np.isfinite(a) | (a != np.floor(a))
        if bad.any():
            raise DataError(f"edge list chunk {f}: node id {float(a[bad][0])} is not an integer")
    elif np.issubdtype(a.dtype, np.unsignedinteger):
        if a.size and a.max() > np.iinfo(np.int64).max:
            raise DataError(f"edge list chunk {f}: node id {int(a.max())} is too large (ids must fit in int64)")
    elif not np.issubdtype(a.dtype, np.integer):
        raise DataError(f"edge list chunk {f}: node ids are {a.dtype}, not integers")
    return a.astype(np.int64)


def read_chunk(f: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        if f.suffix == ".npy":
            a = np.load(f)
            return _ids(a[:, 0], f), _ids(a[:, 1], f)
        if f.suffix == ".npz":
            with np.load(f) as z:
                return _ids(z["src"], f), _ids(z["dst"], f)
        layout = _text_layout(f)
        if layout is None:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        delim, header = layout
        with warnings.catch_warnings():  # numpy 1.x reads '1.5' as 1, and ids beyond int64 as garbage, with a warning
            warnings.filterwarnings("error", r"loadtxt\(\): Parsing an integer via a float", DeprecationWarning)
            a = np.loadtxt(f, delimiter=delim, comments=("#", "%"), dtype=np.int64, usecols=(0, 1), skiprows=header,
                           ndmin=2)
        return a[:, 0], a[:, 1]
    except DataError:
        raise
    except ValueError as e:
        if "could not convert" in str(e):  # a float, a word or an id beyond int64 in a text chunk
            why = str(e).splitlines()[0].rstrip(".")
            raise DataError(f"edge list chunk {f}: a node id is not an integer ({why})") from None
        raise DataError(f"edge list chunk {f} cannot be read: {str(e).splitlines()[0]}") from None
    except (OSError, EOFError, KeyError, IndexError) as e:
        raise DataError(f"edge list chunk {f} cannot be read: {str(e).splitlines()[0] or type(e).__name__}") from None


def read_chunks(files: list[Path], reverse: bool = False) -> Iterator[tuple[Path, np.ndarray, np.ndarray]]:
    """Each chunk in turn (with its reversed edges appended if asked), checked for negative ids."""
    for f in files:
        src, dst = read_chunk(f)
        if src.size and min(src.min(), dst.min()) < 0:
            raise DataError(f"edge list chunk {f}: negative node id {int(min(src.min(), dst.min()))}")
        if reverse:
            src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        yield f, src, dst


def load_edge_list(spec: str, num_nodes: int | None = None, reverse: bool = False, relabel: bool = True) -> Graph:
    """The CSR of an edge list; sparse ids (module docstring of `partition.node_ids`) are compacted to 0..n-1
    when `relabel`, else refused, and the graph then keeps the original id of each node (`original_ids`)."""
    files = chunk_files(spec)
    room, source = available_bytes()
    if num_nodes and room is not None and 17 * num_nodes > room:  # in-degree, seen flag and row pointer per node
        raise DataError(f"edge list '{spec}': ?nodes={num_nodes} needs {17 * num_nodes / 2**30:.1f} GiB for its "
                        f"per-node counts, more than the {room / 2**30:.1f} GiB available ({source})")
    seen = NodeIds(num_nodes)
    for _, src, dst in read_chunks(files, reverse):  # pass 1: the ids and the in-degree of each
        seen.add(src, dst)
    if seen.entries == 0:
        raise DataError(f"edge list '{spec}' holds no edges")
    compact = _compaction(spec, seen, num_nodes, relabel)
    deg = seen.in_degree(compact is not None)
    n = deg.shape[0]
    mapped = seen.mapper() if compact is not None else None
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(deg, out=indptr[1:])
    del seen  # its dense arrays, before the edges are allocated
    indices = np.empty(int(indptr[-1]), np.int64)
    fill = indptr[:-1].copy()
    for _, src, dst in read_chunks(files, reverse):  # pass 2: place each edge in its row
        if not src.size:
            continue
        if mapped is not None:
            src, dst = mapped(src), mapped(dst)
        order = np.argsort(dst, kind="stable")
        d, s = dst[order], src[order]
        starts = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
        rank = np.arange(d.shape[0]) - np.repeat(starts, np.diff(np.r_[starts, d.shape[0]]))
        indices[fill[d] + rank] = s
        fill[d[starts]] += np.diff(np.r_[starts, d.shape[0]])
    if reverse:  # an edge stored both ways in the file now appears twice in each direction: keep one
        indptr, indices = coalesce_rows(indptr, indices)
    none = np.zeros(n, bool)
    return Graph(indptr, indices, np.zeros((n, 0), np.float32), np.full(n, -1, np.int64), none, none, none,
                 name=Path(spec).stem or "edges", original_ids=compact)


def _compaction(spec: str, seen: NodeIds, num_nodes: int | None, relabel: bool) -> np.ndarray | None:
    """The original id of every node when the ids must be compacted (None when they are used as they are)."""
    if not seen.needs_relabel:
        return None
    bound = f"?nodes={num_nodes}" if num_nodes else f"twice the {seen.distinct} distinct ids"
    if not relabel:
        raise DataError(f"edge list '{spec}': node id {seen.top - 1} is beyond {bound}, and ?relabel=false "
                        f"forbids compacting the ids to 0..{seen.distinct - 1}")
    if num_nodes and seen.distinct > num_nodes:
        raise DataError(f"edge list '{spec}' holds {seen.distinct} distinct node ids, more than ?nodes={num_nodes}")
    return seen.original_ids()


def coalesce_rows(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR rows sorted, duplicate entries dropped."""
    n = indptr.shape[0] - 1
    rows = np.repeat(np.arange(n), np.diff(indptr))
    order = np.lexsort((indices, rows))
    rows, cols = rows[order], indices[order]
    keep = np.r_[True, (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])]
    out = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=n), out=out[1:])
    return out, cols[keep]
