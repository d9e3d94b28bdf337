"""No run aborts at exit: 3 runs each of a 4-rank user script that never calls close, and of the CLI's error
path (exit 2). `python scripts/exit_soak.py` runs the 50-run soak."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_repeated_runs_of_each_exit_cleanly():
    """Three launches of each (scripts/exit_soak.py --runs N soaks longer; docs/layers.md has its figures)."""
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "exit_soak.py"), "--runs", "3", "--busy", "0"],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]]
            for ln in r.stdout.splitlines() if ln.startswith("| user") or ln.startswith("| cli-error")}
    assert rows == {"user": ["0", "3", "3", "-", "0"], "cli-error": ["2", "3", "3", "-", "0"]}, r.stdout
