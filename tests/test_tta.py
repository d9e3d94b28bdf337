"""Time to accuracy (gnn_dist.train.tta): validation picks the epoch, evaluation time stays apart."""
from __future__ import annotations

import pytest

from gnn_dist.train import tta


def rec(epoch_time: float, val: float | None, test: float | None, eval_time: float = 0.5) -> dict:
    r = {"epoch_time": epoch_time}
    if val is not None:
        r.update(val_acc=val, test_acc=test, eval_time=eval_time)
    return r


def test_the_first_epoch_whose_validation_picked_model_meets_the_target():
    runs = [rec(1.0, 0.80, 0.79), rec(1.0, 0.90, 0.88), rec(1.0, 0.89, 0.95), rec(1.0, 0.91, 0.90)]
    r = tta.time_to_target(runs, 0.895)
    # epoch 2's test score (0.95) is above the target, but validation still picks epoch 1 (0.88) there
    assert (r.epochs, r.wall_s, r.test, r.final_test) == (4, 4.0, 0.90, 0.90)
    assert r.eval_s == 2.0  # counted apart: 4 x 0.5, not in wall_s
    assert r.cell() == "4.0 s / 4 ep"


def test_not_reached_and_epochs_without_evaluation():
    runs = [rec(2.0, None, None), rec(2.0, 0.5, 0.5), rec(2.0, None, None), rec(2.0, 0.6, 0.6)]
    r = tta.time_to_target(runs, 0.7)
    assert r.epochs is None and r.cell() == "not reached" and r.final_test == 0.6
    r = tta.time_to_target(runs, 0.55)
    assert (r.epochs, r.wall_s) == (4, 8.0)  # unevaluated epochs still cost their training time


def test_the_default_target_is_exacts_final_test_minus_three_tenths_of_a_point():
    exact = [rec(1.0, 0.9, 0.91), rec(1.0, None, None), rec(1.0, 0.95, 0.9843)]
    assert tta.default_target(exact) == pytest.approx(0.9813)


def test_runs_without_a_validation_split_are_picked_by_their_test_score():
    runs = [{"epoch_time": 1.0, "test_acc": 0.5}, {"epoch_time": 1.0, "test_acc": 0.7},
            {"epoch_time": 1.0, "test_acc": 0.6}]
    assert tta.time_to_target(runs, 0.65).epochs == 2
    assert tta.curve(runs) == ([1.0, 2.0, 3.0], [0.5, 0.7, 0.7])


def test_table_names_every_run():
    out = tta.table({"exact": [rec(1.0, 0.9, 0.9)], "stale": [rec(0.5, 0.8, 0.8)]}, 0.85)
    assert "exact" in out and "1.0 s / 1 ep" in out and "not reached" in out
