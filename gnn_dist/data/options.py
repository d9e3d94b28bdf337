"""Options on data set specs that name a file: `file:PATH?key=value&key=value`, and the splits they ask for.

One grammar for every spec that takes a path (`file:`, `edges:`, `metis:`, `json:`, `hfile:`): the path,
then `?`, then `key=value` pairs joined by `&`. Values may hold commas and colons (`split=0.6,0.2`);
a literal `?`, `&` or `%` in a path or value is written `%3F`, `%26` or `%25` (URL percent-encoding).

Splits, for files that store none: `split=20` draws 20 training nodes per class (`val=30` per class for
validation, the rest test: the protocol of Shchur et al.), `split=0.6,0.2` draws fractions for train and
val (the rest test). Draws are seeded (`seed=`, else the command's --seed), and train, val and test never
share a node.
"""
from __future__ import annotations

import sys
from urllib.parse import unquote

import numpy as np

from partition.errors import UsageError


def split_spec(rest: str, spec: str, known: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """'PATH?k=v&k=v' -> (PATH, {k: v}); refuses keys the loader does not take, naming the ones it does."""
    path, _, query = rest.partition("?")
    options: dict[str, str] = {}
    for item in filter(None, query.split("&")):
        key, eq, value = item.partition("=")
        key = unquote(key.strip())
        if not eq or not key:
            raise UsageError(f"data set spec '{spec}': expected key=value after '?', got '{item}'")
        if key not in known:
            raise UsageError(f"data set spec '{spec}': unknown option '{key}' (this form takes "
                             f"{', '.join(known) or 'none'})")
        options[key] = unquote(value.strip())
    return unquote(path), options


def flag(options: dict[str, str], key: str, spec: str, default: bool = False) -> bool:
    value = options.get(key)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"data set spec '{spec}': '{key}' must be true or false, got '{value}'")


def number(options: dict[str, str], key: str, spec: str, kind=int, default=None):
    value = options.get(key)
    if value is None:
        return default
    try:
        return kind(value)
    except ValueError:
        raise UsageError(f"data set spec '{spec}': '{key}' must be {kind.__name__}, got '{value}'") from None


def note(line: str) -> None:
    """A choice made for the user, said once on stderr (e.g. a split drawn because the file stores none)."""
    sys.stderr.write(f"[gnn-dist] note: {line}\n")


def seeded_split(y: np.ndarray, split: str, seed: int, val_per_class: int = 30, spec: str = "") -> tuple[np.ndarray, ...]:
    """Disjoint train/val/test masks: `split` is a count per class ('20') or fractions ('0.6,0.2')."""
    n = y.shape[0]
    if y.ndim == 2 and "," not in split and "/" not in split:
        raise UsageError(f"data set spec '{spec}': a per-class split needs one class per node; these targets are "
                         f"multi-label: use fractions (split=0.6,0.2)")
    rng = np.random.default_rng(seed)
    masks = [np.zeros(n, bool) for _ in range(3)]
    parts = split.replace("/", ",").split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) == 1 and values[0] >= 1 and values[0].is_integer():
        for c in np.unique(y[y >= 0]):
            members = rng.permutation(np.flatnonzero(y == c))
            k = int(values[0])
            masks[0][members[:k]] = True
            masks[1][members[k:k + val_per_class]] = True
        masks[2] = ~(masks[0] | masks[1]) & (y >= 0)
        return tuple(masks)
    if len(values) == 2 and all(0 <= v < 1 for v in values) and sum(values) < 1:
        labelled = np.arange(n) if y.ndim == 2 else np.flatnonzero(y >= 0)  # a node without a label joins no mask
        perm = rng.permutation(labelled)
        n_tr, n_va = int(round(values[0] * labelled.shape[0])), int(round(values[1] * labelled.shape[0]))
        masks[0][perm[:n_tr]] = True
        masks[1][perm[n_tr:n_tr + n_va]] = True
        masks[2][perm[n_tr + n_va:]] = True
        return tuple(masks)
    raise UsageError(f"data set spec '{spec}': split must be a count per class (split=20) or train and val "
                     f"fractions (split=0.6,0.2), got '{split}'")


def masks_or_split(stored, y: np.ndarray, what: str, split: str | None = None, seed: int = 0, val: int = 30,
                   spec: str = "", of: str = "") -> tuple[np.ndarray, ...]:
    """The masks a file stores (`stored`: three arrays, None for one it lacks, or None), or a seeded split where
    `split` asks for one; with no masks and no split, a 60/20/20 split and a note saying so: never every node in
    train, val and test at once. `of` qualifies what the file lacks masks for (" for its target type")."""
    n = y.shape[0]
    if split is None and stored is not None and any(m is not None for m in stored):
        return tuple(np.zeros(n, bool) if m is None else np.asarray(m, bool) for m in stored)
    if split is None:
        note(f"{what} stores no train/val/test masks{of}: drew a seeded 60/20/20 split (seed {seed}); "
             f"choose one with ?split=20 (per class) or ?split=0.6,0.2")
    return seeded_split(np.asarray(y), split or "0.6,0.2", seed, val, spec)


def largest_component(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """Node ids of the largest (weakly) connected component, ascending."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    adj = sp.coo_matrix((np.ones(src.shape[0], np.int8), (src, dst)), shape=(n, n))
    _, label = connected_components(adj, directed=True, connection="weak")
    return np.flatnonzero(label == np.bincount(label).argmax())
