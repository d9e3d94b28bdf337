"""Each rank writes its share of the split as `gd.load_partition(DIR, ctx).split()` gives it (tests/test_split.py)."""
import sys

import numpy as np

import gnn_dist as gd

part_dir, out = sys.argv[1], sys.argv[2]
with gd.init() as ctx:
    np.savez(f"{out}/rank{ctx.rank}.npz", **gd.load_partition(part_dir, ctx).split())
