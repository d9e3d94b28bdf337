"""Evaluation is exact by itself and leaves training alone: real 2-rank launches.

Between two training steps, an evaluation (the trainer's, or a user's no_grad forward) under staleness,
row skipping or adaptive bit-widths leaves every later loss bit-identical; under int8, repeated evaluations
agree bit for bit and equal the same model through an exact exchange.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import worker_on
from tests.eval_worker import EPOCHS, POLICIES

pytestmark = pytest.mark.slow  # multi-rank launches: `pytest -m 'not slow'` skips them



@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out, r = worker_on(tmp_path_factory.mktemp("evalexact"), "cora", 2, "eval_worker.py")
    return out, r.stderr


@pytest.mark.parametrize("policy", list(POLICIES))
def test_an_evaluation_between_steps_changes_no_loss(run, policy):
    out, _ = run
    for rank in range(2):
        without = np.load(out / f"{policy}-without-rank{rank}.npy")
        with_eval = np.load(out / f"{policy}-with-rank{rank}.npy")
        assert without.shape == (EPOCHS,) and np.isfinite(without).all()
        assert np.array_equal(without, with_eval), (policy, without - with_eval)


def test_the_policies_really_changed_training(run):
    """Otherwise the test above could not fail: each policy's losses differ from the others'."""
    out, _ = run
    losses = [np.load(out / f"{p}-without-rank0.npy") for p in POLICIES]
    assert all(not np.array_equal(a, b) for i, a in enumerate(losses) for b in losses[i + 1:])


def test_int8_evaluations_are_exact_and_repeatable(run):
    out, _ = run
    for rank in range(2):
        z = np.load(out / f"int8-rank{rank}.npz")
        assert np.array_equal(z["evals"][0], z["evals"][1]) and np.array_equal(z["evals"][0], z["evals"][2])
        assert np.array_equal(z["evals"][0], z["exact"])


def test_a_torch_batch_norm_gets_one_warning(run):
    _, stderr = run
    lines = [ln for ln in stderr.splitlines() if "normalise each rank's rows apart" in ln]
    assert len(lines) == 1 and lines[0].startswith("[gnn-dist] warning: 0 normalise"), stderr[-2000:]
