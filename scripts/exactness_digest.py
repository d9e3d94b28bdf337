"""Digest of the exactness tests' outputs, to show that a refactor changed no bit.

Record:  GNN_DIST_EXACT_ARCHIVE=/tmp/before pytest tests/test_distributed_exact.py tests/test_typed_exact.py \\
             tests/test_dynamic_exact.py tests/test_message_semantics.py
Compare: python scripts/exactness_digest.py /tmp/before /tmp/after
Each worker's output folder is copied there (logits, gradients and losses at P = 1, 2, 4); this script hashes every
array of every file and prints how many arrays are bit-identical between the two archives.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np


def digest(folder: Path) -> dict[str, str]:
    """sha256 of every array, keyed by worker run, file and array name (runs are keyed without their order)."""
    out = {}
    for f in sorted(folder.rglob("*.np[yz]")):
        run = f.parent.name.rsplit("-", 1)[0]
        data = np.load(f)
        arrays = {"": data} if isinstance(data, np.ndarray) else {k: data[k] for k in data.files}
        for name, a in arrays.items():
            out[f"{run}/{f.name}/{name}"] = hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
    return out


def main() -> int:
    before, after = (digest(Path(p)) for p in sys.argv[1:3])
    missing = sorted(set(before) ^ set(after))
    differ = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    print(f"{len(before)} arrays before, {len(after)} after: {len(set(before) & set(after)) - len(differ)} identical, "
          f"{len(differ)} differ, {len(missing)} in one archive only")
    for k in (differ + missing)[:20]:
        print("  ", k)
    return 1 if differ or missing else 0


if __name__ == "__main__":
    sys.exit(main())
