"""Where shipped data files live, for editable and plain installs alike."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from partition.errors import DataError

ENV_VAR = "GNN_DIST_DATA_DIR"


def data_dirs(override: str | os.PathLike | None = None) -> list[Path]:
    """Candidate roots, most specific first: --data-dir, $GNN_DIST_DATA_DIR, the source tree, the install prefix."""
    dirs = []
    if override:
        dirs.append(Path(override))
    if os.environ.get(ENV_VAR):
        dirs.append(Path(os.environ[ENV_VAR]))
    dirs.append(Path(__file__).resolve().parents[2] / "datasets")
    dirs.append(Path(sys.prefix) / "share" / "gnn-dist" / "datasets")
    return dirs


def find_data(name: str, override: str | os.PathLike | None = None) -> Path:
    """The folder `name` under the first data root that has it."""
    for root in data_dirs(override):
        if (root / name).is_dir():
            return root / name
    tried = ", ".join(str(d) for d in data_dirs(override))
    raise DataError(f"data set files '{name}' not found (looked in {tried}; pass --data-dir)")


def cache_dir() -> Path:
    """A writable place for processed copies (PyG's loaders write next to their raw files)."""
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gnn-dist"
    root.mkdir(parents=True, exist_ok=True)
    return root
