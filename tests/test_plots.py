"""`gnn-dist info --plot` writes PNGs of a partition and of a training log."""
from __future__ import annotations

import json

import pytest

from tests.conftest import cli_partition, run_cli

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_partition_and_run_plots(tmp_path):
    part = cli_partition(tmp_path, "karate", 2)
    png = tmp_path / "parts.png"
    r = run_cli("info", str(part), "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == PNG and png.stat().st_size > 10_000
    log = tmp_path / "run.jsonl"
    log.write_text("\n".join(json.dumps({"epoch": e, "loss": 2.0 / (e + 1), "epoch_time": 0.1, "val_acc": e / 10,
                                         "test_acc": e / 11}) for e in range(10)))
    curves = tmp_path / "run.png"
    r = run_cli("info", "--run", str(log), "--plot", str(curves))
    assert r.returncode == 0, r.stderr
    assert curves.read_bytes()[:8] == PNG and "plot:" in r.stdout
