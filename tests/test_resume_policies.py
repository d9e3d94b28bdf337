"""Resume is exact under every exchange policy, and the codec does not move the dropout masks.

One launch at P = 2 (tests/resume_worker.py): per policy, a run straight through and a run stopped after its
checkpoint, then resumed by fresh objects (partition, exchange, model, trainer: what a new process makes).
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import worker_on
from tests.resume_worker import EPOCHS, POLICIES, STOP

pytestmark = pytest.mark.slow  # a multi-rank launch


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out, _ = worker_on(tmp_path_factory.mktemp("resume"), "cora", 2, "resume_worker.py")
    return {(name, rank): np.load(out / f"{name}-rank{rank}.npz") for name in POLICIES for rank in (0, 1)}


@pytest.mark.parametrize("policy", list(POLICIES))
def test_stop_and_resume_equals_the_uninterrupted_run_bit_for_bit(runs, policy):
    for rank in (0, 1):
        r = runs[(policy, rank)]
        assert len(r["straight"]) == EPOCHS and len(r["resumed"]) == EPOCHS - STOP
        assert r["straight"][STOP:].tolist() == r["resumed"].tolist(), (policy, rank)
        assert bool(r["weights_equal"]), (policy, rank)


def test_every_policy_draws_the_dropout_masks_of_the_exact_run(runs):
    """Hidden dropout has its own stream: quantised, stale or skipped messages draw no key from it. Where rows
    are reused, the layer that aggregates its input drops them keyed by node id (gnn_dist.nn.boundary) and
    draws nothing: the narrowing layer then draws the key the exact run's first hidden layer drew."""
    for rank in (0, 1):
        exact = runs[("fp32", rank)]
        masks = [exact[f"mask{i}"] for i in range(2 * EPOCHS)]
        assert len([k for k in exact.files if k.startswith("mask")]) == 2 * EPOCHS  # two hidden layers
        assert not np.array_equal(masks[0], masks[2])  # a new mask every epoch
        assert int(exact["keyed"]) == 0
        for policy, config in POLICIES.items():
            other = runs[(policy, rank)]
            reused = bool(config.get("staleness") or config.get("skip_threshold"))
            assert (int(other["keyed"]) > 0) == reused, policy  # the keyed path ran exactly where rows are reused
            drawn = masks[::2] if reused else masks
            assert len([k for k in other.files if k.startswith("mask")]) == len(drawn), policy
            assert all(np.array_equal(m, other[f"mask{i}"]) for i, m in enumerate(drawn)), (policy, rank)
