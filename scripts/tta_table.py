"""Time to accuracy of training logs (`gnn-dist train --log`), side by side: one table, optionally a plot.

    python scripts/tta_table.py EXACT.jsonl OTHER.jsonl ... [--target 0.98] [--png F]

The first log is the reference: the target is its final test score minus 0.3 points
(or --target). Each log is named by its file's stem (gnn_dist.train.tta says how the
epoch is picked and what the times count).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnn_dist.cli.plots import plot_tta  # noqa: E402
from gnn_dist.train import tta  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--target", type=float, default=None)
    ap.add_argument("--png", default=None)
    a = ap.parse_args()
    runs = {Path(p).stem: [r for r in map(json.loads, Path(p).read_text().splitlines()) if "epoch" in r]
            for p in a.logs}
    target = a.target if a.target is not None else tta.default_target(next(iter(runs.values())))
    print(tta.table(runs, target))
    if a.png:
        print(f"plot: {plot_tta(runs, target, a.png)}")


if __name__ == "__main__":
    main()
