"""Model files and checkpoints are data: a file that would run code, or import a module it names, is refused
in one line and nothing in it runs; a user's model runs only when the command line names it again."""
from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest
import torch

from gnn_dist.train import checkpoint
from partition.errors import UsageError
from tests.conftest import ROOT, cli_partition, one_error_line
from tests.conftest import run_cli as _run_cli

# imported, this module leaves a marker: the proof that a file made gnn-dist import it
EVIL_MODULE = "from pathlib import Path\nPath(__file__).with_name('IMPORTED').touch()\ndef build(*a):\n    pass\n"


class RunsACommand:
    """Unpickled by a plain pickle load, this runs a shell command (what a crafted .pt does)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class NamesAModule:
    """Pickled as a call of evilmod.build: a plain load would import evilmod first."""

    def __reduce__(self):
        return sys.modules["evilmod"].build, ()


def names_evilmod(path) -> None:
    """Write a torch file whose pickle names evilmod.build, without importing the real evilmod here."""
    fake = types.ModuleType("evilmod")
    fake.build = lambda: None
    fake.build.__module__, fake.build.__qualname__ = "evilmod", "build"
    sys.modules["evilmod"] = fake
    try:
        torch.save({"format": checkpoint.CHECKPOINT, "version": checkpoint.VERSION, "model": NamesAModule()}, path)
    finally:
        del sys.modules["evilmod"]


@pytest.fixture(scope="module")
def karate1(tmp_path_factory):
    return cli_partition(tmp_path_factory.mktemp("files"), "karate", 1)


@pytest.fixture
def hostile(tmp_path):
    """A working directory with evilmod.py in it, and the two hostile files."""
    (tmp_path / "evilmod.py").write_text(EVIL_MODULE)
    torch.save({"model": RunsACommand(tmp_path / "RAN")}, tmp_path / "runs.pt")
    names_evilmod(tmp_path / "names.pt")
    return tmp_path


def run_cli(*args: str, cwd=None):
    """The CLI from this checkout, in a working directory where evilmod.py is importable."""
    return _run_cli(*args, cwd=cwd, env={"PYTHONPATH": str(ROOT)})


def predict(folder, *args: str, monkeypatch, capsys) -> subprocess.CompletedProcess:
    """`gnn-dist predict` in this process (it refuses before starting any rank), evilmod.py importable."""
    from gnn_dist.cli.main import main

    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    capsys.readouterr()
    rc = main(["predict", *args, "--out", str(folder / "o.npy")])
    return subprocess.CompletedProcess(args, rc, "", capsys.readouterr().err)


def nothing_ran(folder) -> bool:
    return not (folder / "RAN").exists() and not (folder / "IMPORTED").exists()


@pytest.mark.parametrize("file", ["runs.pt", "names.pt"])
def test_predict_refuses_a_file_that_would_run_code(karate1, hostile, file, monkeypatch, capsys):
    r = predict(hostile, "--partition", str(karate1), "--model-file", str(hostile / file), monkeypatch=monkeypatch,
                capsys=capsys)
    one_error_line(r, "refused, and nothing in it was run")
    assert ("posix.system" if file == "runs.pt" else "evilmod.build") in r.stderr
    assert nothing_ran(hostile) and not (hostile / "o.npy").exists()


@pytest.mark.parametrize("file", ["runs.pt", "names.pt"])
def test_resume_refuses_a_checkpoint_that_would_run_code(karate1, hostile, file):
    ckpt = hostile / "ck"
    ckpt.mkdir()
    (hostile / file).rename(ckpt / "checkpoint.pt")
    r = run_cli("train", "--partition", str(karate1), "--epochs", "2", "--quiet", "--checkpoint-dir", str(ckpt),
                "--resume", cwd=hostile)
    one_error_line(r, "refused, and nothing in it was run", strict=False)
    assert nothing_ran(hostile)


def model_file(path, name: str) -> None:
    spec = {"name": name, "hidden": 16, "layers": 2, "heads": 8, "dropout": 0.5, "num_bases": 2, "task": "node",
            "embedding_dim": None, "normalize_features": False}
    torch.save(checkpoint.stamped(checkpoint.MODEL, model=spec, state={}), path)


@pytest.mark.parametrize("named, needle", [(None, "pass --model evilmod:build (gd.load_model: model="),
                                           ("evilmod:other", "does not match the model")])
def test_a_user_model_named_in_a_file_runs_only_if_named_again(karate1, hostile, named, needle, monkeypatch, capsys):
    model_file(hostile / "m.pt", "evilmod:build")
    r = predict(hostile, "--partition", str(karate1), "--model-file", str(hostile / "m.pt"),
                *(["--model", named] if named else []), monkeypatch=monkeypatch, capsys=capsys)
    one_error_line(r, needle)
    assert nothing_ran(hostile)


def test_a_file_of_the_old_schema_names_its_version(karate1, tmp_path, monkeypatch, capsys):
    torch.save({"model": {}, "args": {"model": "gcn", "hidden": 16}}, tmp_path / "old.pt")
    r = predict(tmp_path, "--partition", str(karate1), "--model-file", str(tmp_path / "old.pt"),
                monkeypatch=monkeypatch, capsys=capsys)
    one_error_line(r, "is a version-1 model file")


@pytest.mark.slow  # seconds of subprocess start-up: the full suite runs it, the fast subset has others of its kind
def test_a_checkpoint_of_another_model_is_one_line(karate1, tmp_path):
    """Resuming with flags that shape another model (a checkpoint of hidden 8, a run of hidden 16) is the user's
    mismatch, not an error in gnn-dist's code: one line naming the checkpoint and the first mismatch, exit 2
    (was exit 1, blaming checkpoint.py, with torch's header line only)."""
    import json

    from gnn_dist.nn import build_model

    meta = json.loads((karate1 / "partition.json").read_text())
    model = build_model("gcn", meta["num_features"], 8, meta["num_classes"])
    opt = torch.optim.Adam(model.parameters())
    (tmp_path / "ck").mkdir()
    torch.save(checkpoint.stamped(checkpoint.CHECKPOINT, epoch=0, seed=0, world_size=1, model=model.state_dict(),
                                  optimizer=opt.state_dict(), schedule=None, exchange=None, best=None),
               tmp_path / "ck" / "checkpoint.pt")
    r = run_cli("train", "--partition", str(karate1), "--epochs", "2", "--quiet", "--checkpoint-dir",
                str(tmp_path / "ck"), "--resume")
    one_error_line(r, "does not fit this model: size mismatch for", strict=False)
    assert str(tmp_path / "ck" / "checkpoint.pt") in r.stderr


def test_an_optimiser_state_of_another_optimiser_is_one_line():
    w = torch.nn.Parameter(torch.ones(3))
    adam = torch.optim.Adam([w])
    w.grad = torch.ones(3)
    adam.step()
    sgd = torch.optim.SGD([w], lr=0.1, momentum=0.9)
    with pytest.raises(UsageError, match="holds the state of another optimiser than this run's --optimizer sgd"):
        checkpoint.load_optimizer_state(sgd, checkpoint.optimizer_state(adam, types.SimpleNamespace(world_size=1)),
                                        "checkpoint ck")


def test_a_checkpoint_missing_a_field_is_one_line(tmp_path):
    """An edited or foreign file of the right format and version: one line naming the field, not a KeyError
    in the loop (exit 1 on every rank)."""
    torch.save(checkpoint.stamped(checkpoint.CHECKPOINT, epoch=3, seed=0, world_size=2, model={}, schedule=None,
                                  exchange=None, best=None), tmp_path / "checkpoint.pt")
    with pytest.raises(UsageError, match=r"is not a complete gnn-dist checkpoint \(field optimizer\)"):
        checkpoint.read(tmp_path / "checkpoint.pt", checkpoint.CHECKPOINT)
