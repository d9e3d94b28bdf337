"""Progress that suits where it goes (gnn_dist.progress): a bar on a terminal, plain lines in pipes."""
from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gnn_dist.progress import Progress, resolve
from tests.conftest import ROOT, cli_partition, one_error_line, run_cli, said


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(total: int, mode: str, steps: int | None = None, stream=None) -> str:
    out = stream or io.StringIO()
    with Progress(total, "train", "epochs", mode, stream=out) as bar:
        for i in range(total if steps is None else steps):
            bar.set_postfix(loss=f"{1 / (i + 1):.4f}")
            bar.update()
    return out.getvalue()


def test_lines_are_one_per_tenth_and_never_redrawn():
    text = _run(200, "lines")
    lines = text.splitlines()
    assert "\r" not in text and text.endswith("\n") and len(lines) == 10
    assert [int(re.match(r"train: (\d+)/200 epochs \((\d+)%\)", ln)[1]) for ln in lines] == list(range(20, 201, 20))
    assert lines[-1].endswith("loss=0.0050")  # the figures of the epoch that reached the tenth


def test_lines_for_short_runs_and_early_stops():
    assert len(_run(4, "lines").splitlines()) == 4  # fewer than ten steps: one line each
    stopped = _run(200, "lines", steps=57).splitlines()  # early stop: the last count is still reported
    assert len(stopped) == 3 and stopped[-1].startswith("train: 57/200 epochs (28%)")


def test_auto_is_a_bar_on_a_terminal_and_lines_elsewhere():
    assert resolve("auto", Terminal()) == "bar" and resolve("auto", io.StringIO()) == "lines"
    assert resolve(True, io.StringIO()) == "lines" and resolve(False) == "none"
    assert "\r" in _run(30, "auto", stream=Terminal())
    assert _run(30, "none") == ""


def test_quiet_contradicting_progress_is_one_line():
    one_error_line(run_cli("train", "--partition", "nowhere", "--quiet", "--progress", "bar"),
                   "--quiet means --progress none; it contradicts --progress bar")


@pytest.mark.slow  # multi-rank: the fast subset keeps a handful of launches (tests/conftest.py)
def test_mpiexec_through_a_pipe_prints_plain_lines(tmp_path):
    """As a user pipes it: `mpiexec -n 2 gnn-dist train ... 2>&1 | cat` has no carriage return, ten progress
    lines in order, and the final line on a line of its own. mpiexec forwards a rank's stdout (the final
    line) and stderr (progress) separately, so the final line may overtake the last progress line."""
    part = cli_partition(tmp_path, "karate", 2)
    mpiexec = Path(sys.executable).with_name("mpiexec")
    cmd = f"'{mpiexec}' -n 2 '{sys.executable}' -m gnn_dist train --partition '{part}' --epochs 40 2>&1 | cat"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert r.returncode == 0 and "\r" not in r.stdout, r.stdout
    lines = said(r.stdout)  # and rank 0's line on threads, before the first
    progress = [ln for ln in lines if ln.startswith("train: ")]
    assert [ln.split()[1] for ln in progress] == [f"{k}/40" for k in range(4, 41, 4)], r.stdout
    final = [ln for ln in lines if ln.startswith("final epoch 40/40: loss ")]
    assert len(final) == 1 and re.search(r"\| test acc \d\.\d{4}$", final[0]), r.stdout
    assert len(lines) == len(progress) + len(final), r.stdout  # nothing else, and nothing glued together
