"""Every code block of README.md, docs/layers.md and docs/training.md, run as a reader would run it.

Python blocks run under `mpiexec -n 4` on Cora's 4 parts (`out/cora-4`, as they name it), in a scratch folder:
a block that opens `gd.init()` itself runs as its own script; the fragments (a layer class, a loop body) run in
one script that opens the context they assume (`ctx`, `part`, a `model`, its `opt`, `epochs`, `F`). Shell blocks
run line by line, except a synopsis (`[--flag]`, `a|b` choices), an install step (venv, pip, ruff, the test suite:
what CI itself runs) and a path the reader replaces (`path/to/`): each skip is named by the test.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

FILES = ("README.md", "docs/layers.md", "docs/training.md")
SHORT_EPOCHS = 5
BIN = Path(sys.executable).parent
CONTEXT = """
import torch
import torch.nn.functional as F
import gnn_dist as gd

with gd.init() as ctx:
    part = gd.load_partition("out/cora-4", ctx)
    torch.manual_seed(0)
    model = gd.nn.build_model("gcn", part.num_features, 16, part.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    epochs = 2
    for block in BLOCKS:
        exec(compile(block, "<docs block>", "exec"))
    print("fragments ran")
"""


def blocks(path: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(\w*)\n(.*?)```", (ROOT / path).read_text(), re.S)]


def shell_commands(body: str) -> tuple[list[str], list[tuple[str, str]]]:
    """(commands to run, [(skipped command, why)]) of one shell block."""
    run, skipped = [], []
    for line in body.replace("\\\n", " ").splitlines():
        line = line.split("  #")[0].strip()
        for cmd in (c.strip() for c in line.split(" && ") if c.strip()):
            words = cmd.split()
            if re.search(r"\[--|\w\|\w", cmd):
                skipped.append((cmd, "synopsis"))
            elif words[0] in ("python3", "pip") and ("venv" in cmd or "pip" in cmd) or "/pip " in cmd \
                    or "ruff" in words[0] or "pytest" in cmd:
                skipped.append((cmd, "install or CI step"))
            elif "path/to/" in cmd:
                skipped.append((cmd, "a path the reader replaces"))
            else:
                run.append(short(cmd.replace(".venv/bin/", "")))
    return run, skipped


def short(cmd: str) -> str:
    """`cmd`, training SHORT_EPOCHS epochs where it trains the default 200 (a block proves that a command runs
    as written; the figures the docs quote come from the commands beside them, run in full)."""
    trains = "gnn-dist train" in cmd or cmd.startswith("python examples/")
    return f"{cmd} --epochs {SHORT_EPOCHS}" if trains and "--epochs" not in cmd else cmd


def _run(cmd: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(ROOT))
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, (cmd, r.stderr[-3000:])
    return r


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A reader's folder: Cora in 4 parts, and the repository's examples beside it (the docs run
    `examples/...` from the repository root)."""
    d = tmp_path_factory.mktemp("docs")
    (d / "examples").symlink_to(ROOT / "examples")
    _run([str(BIN / "gnn-dist"), "partition", "--dataset", "cora", "--parts", "4", "--out", "out/cora-4"], d)
    return d


@pytest.mark.slow
def test_every_python_block_runs(scratch):
    own, fragments = [], []
    for path in FILES:
        for lang, body in blocks(path):
            if lang == "python":
                (own if re.search(r"^[^#\n]*gd\.init\(", body, re.M) else fragments).append(body)
    assert len(own) == 2 and len(fragments) == 4, (len(own), len(fragments))
    for i, body in enumerate(own):
        script = scratch / f"block{i}.py"
        script.write_text(re.sub(r"fit\((epochs=)?200", f"fit(\\g<1>{SHORT_EPOCHS}", body).replace(
            "checkpoint_every=50", f"checkpoint_every={SHORT_EPOCHS}"))
        first = _run([str(BIN / "mpiexec"), "-n", "4", sys.executable, str(script)], scratch)
        if "resume=True" in body:  # docs/training.md's loop: run again, it resumes a finished run
            assert re.search(rf"{SHORT_EPOCHS} epochs: test accuracy [01]\.\d{{4}}", first.stdout), first.stdout
            again = _run([str(BIN / "mpiexec"), "-n", "4", sys.executable, str(script)], scratch)
            assert f"already at epoch {SHORT_EPOCHS} of {SHORT_EPOCHS}" in again.stderr, again.stderr[-2000:]
            last = json.loads((scratch / "log.jsonl").read_text().splitlines()[-1])  # that run's one record
            assert last["resumed_finished"] is True and last["epoch"] == SHORT_EPOCHS - 1, last
    script = scratch / "fragments.py"
    script.write_text(f"BLOCKS = {fragments!r}\n" + CONTEXT)
    assert "fragments ran" in _run([str(BIN / "mpiexec"), "-n", "4", sys.executable, str(script)], scratch).stdout
    assert (scratch / "mine.pt").is_file() and (scratch / "log.jsonl").is_file()  # docs/training.md's block
    # what gd.save_model wrote is what `train --save-model` writes: predict runs it
    _run([str(BIN / "mpiexec"), "-n", "4", str(BIN / "gnn-dist"), "predict", "--partition", "out/cora-4",
          "--model-file", "mine.pt", "--out", "pred.npy"], scratch)
    assert (scratch / "pred.npy").is_file()


@pytest.mark.slow
def test_every_shell_block_runs(scratch):
    ran, skipped = [], []
    for path in FILES:
        for lang, body in blocks(path):
            if lang != "python":
                run, skip = shell_commands(body)
                ran += run
                skipped += skip
    for cmd in ran:
        _run(shlex.split(cmd), scratch)
    assert len(ran) >= 6, ran
    assert {why for _, why in skipped} <= {"synopsis", "install or CI step", "a path the reader replaces"}
