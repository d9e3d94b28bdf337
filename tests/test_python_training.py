"""docs/training.md's "Training from Python" block runs as written (one process, on a 1-part partition)."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, cli_partition, run_cli

pytestmark = pytest.mark.slow  # training runs in subprocesses: the full suite runs them


def docs_block() -> str:
    text = (ROOT / "docs" / "training.md").read_text()
    section = text.split("## Training from Python", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_python_training_block_runs(tmp_path):
    part = cli_partition(tmp_path, "karate", 1)
    saved = run_cli("train", "--partition", str(part), "--epochs", "2", "--quiet", "--save-model",
                    str(tmp_path / "m.pt"))
    assert saved.returncode == 0, saved.stderr
    code = docs_block().replace('"out/cora-4"', repr(str(part))).replace("fit(200", "fit(3").replace(
        "checkpoint_every=50", "checkpoint_every=3")
    (tmp_path / "train.py").write_text(code)
    r = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert re.search(r"3 epochs: test accuracy [01]\.\d{4}", r.stdout), r.stdout
    assert (tmp_path / "weights.pt").is_file() and (tmp_path / "ck" / "checkpoint.pt").is_file()
    again = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "already at epoch 3 of 3" in again.stderr, again.stderr[-2000:]
    last = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[-1])  # the second run's one record
    assert last["resumed_finished"] is True and last["epoch"] == 2 and 0 <= last["test_acc"] <= 1, last
