"""`--resume` says what it did: no checkpoint, resumed after epoch N, or a finished run's metrics (one rank)."""
from __future__ import annotations

import json

import pytest

from tests.conftest import cli_partition, run_cli

pytestmark = pytest.mark.slow  # training runs in subprocesses: the full suite runs them


def test_resume_says_what_it_did(tmp_path):
    part = cli_partition(tmp_path, "karate", 1)
    ck, log = tmp_path / "ck", tmp_path / "log.jsonl"
    train = lambda epochs: run_cli("train", "--partition", str(part), "--epochs", str(epochs), "--checkpoint-dir",  # noqa: E731
                                   str(ck), "--checkpoint-every", "2", "--resume", "--progress", "none",
                                   "--log", str(log), "--plot", str(tmp_path / "curves.png"))
    r = train(4)
    assert r.returncode == 0, r.stderr
    assert f"no checkpoint in {ck}: starting from epoch 0" in r.stderr
    r = train(4)  # finished: nothing to train, the checkpoint's metrics
    assert r.returncode == 0, r.stderr
    assert "already at epoch 4 of 4" in r.stderr and "final epoch 4/4: train acc" in r.stdout
    assert "nan" not in r.stdout + r.stderr and "None" not in r.stdout + r.stderr
    last = json.loads(log.read_text().splitlines()[-1])  # the log says so too: one record, nothing trained
    assert last["resumed_finished"] is True and last["epoch"] == 3 and "loss" not in last and "test_acc" in last, last
    log.unlink()
    r = train(6)
    assert r.returncode == 0, r.stderr
    assert f"resumed from {ck / 'checkpoint.pt'}, written after epoch 4 (counted from 1)" in r.stderr
    assert [json.loads(x)["epoch"] for x in log.read_text().splitlines() if '"loss"' in x] == [4, 5]


def test_a_resume_with_other_model_flags_names_them(tmp_path):
    part = cli_partition(tmp_path, "karate", 1)
    ck = tmp_path / "ck"
    train = lambda *flags: run_cli("train", "--partition", str(part), "--epochs", "2", "--checkpoint-dir", str(ck),  # noqa: E731
                                   "--checkpoint-every", "2", "--resume", "--progress", "none", *flags)
    assert train("--hidden", "8").returncode == 0
    r = train("--hidden", "12", "--epochs", "4")
    assert r.returncode == 2 and "trained with other model flags (--hidden 8 there, 12 here): size mismatch" \
        in r.stderr, r.stderr
    r = train("--hidden", "12", "--epochs", "4", "--dropout", "0.2")  # only the shaping flag is blamed
    assert r.returncode == 2 and "(--hidden 8 there, 12 here)" in r.stderr and "dropout" not in r.stderr, r.stderr
    r = train("--hidden", "8", "--epochs", "4", "--dropout", "0.2")  # fits: used, and said
    assert r.returncode == 0 and "--dropout 0.5 there, 0.2 here); its weights fit and are used" in r.stderr, r.stderr
