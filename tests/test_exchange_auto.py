"""`--exchange auto`: which setting the prediction picks, from what, and that it never picks an unmeasured one."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from gnn_dist.runtime import codec
from gnn_dist.runtime.exchange import ExchangeConfig, HaloExchange, HaloPlan, Wire, policy_state
from gnn_dist.train import advice
from tests.conftest import cli_partition, one_error_line, run_cli, run_mpi


def test_fast_links_keep_exact_and_slow_links_pick_a_cheaper_wire():
    nearly_free = {"fp32": (0.005, 0.005), "int4": (0.001, 0.001)}  # not worth a codec (WIN)
    best, why = advice.pick(compute=0.15, comm=nearly_free)
    assert best.name == "exact" and why.startswith("--exchange auto: exact")
    slow = {"fp32": (0.20, 0.20), "int4": (0.03, 0.03)}  # 1 Gbit/s-like: fp32 halo rows cost more than compute
    best, why = advice.pick(compute=0.15, comm=slow)
    assert best.name == "adaptive" and "x exact's speed to accuracy" in why
    tiny = {"fp32": (0.000123, 0.000124), "int4": (2.1e-05, 2.2e-05)}  # Cora: microseconds, not 0.000
    assert "fp32 0.000123 + 0.000124 s, int4 2.1e-05 + 2.2e-05 s" in advice.pick(compute=0.0042, comm=tiny)[1]


def test_stale_forward_rows_cost_only_what_compute_does_not_hide():
    stale = advice.Candidate("stale", {"staleness": 1}, 1.0, "fp32", True)
    assert advice.predict(0.15, {"fp32": (0.10, 0.08)}, stale)[0] == pytest.approx(0.15 + 0.08)
    assert advice.predict(0.15, {"fp32": (0.40, 0.08)}, stale)[0] == pytest.approx(0.15 + 0.08 + 0.25)
    assert advice.predict(0.15, {"fp32": (0.40, 0.08)}, advice.MEASURED[0])[0] == pytest.approx(0.63)


def test_epochs_to_the_target_weigh_in_not_epoch_time_alone():
    """A stale candidate hides the forward wire, but if it needs many more epochs it loses anyway."""
    exact = advice.MEASURED[0]
    slow_stale = advice.Candidate("stale", {"staleness": 1}, 3.0, "fp32", True)
    comm = {"fp32": (0.5, 0.1)}  # compute 0.5 s hides the forward rows entirely
    assert advice.pick(0.5, comm, (exact, slow_stale))[0].name == "exact"  # 1.1 x 1 < 0.6 x 3
    quick_stale = advice.Candidate("stale", {"staleness": 1}, 1.1, "fp32", True)
    assert advice.pick(0.5, comm, (exact, quick_stale))[0].name == "stale"  # 0.6 x 1.1 < 0.9 x 1.1


def test_every_candidate_was_measured_to_pay():
    """Auto picks only settings measured to pay: exact, and settings with a finite epochs factor; staleness
    and skipping were not measured to beat adaptive (docs/benchmarks.md), so no candidate sets them."""
    names = [c.name for c in advice.MEASURED]
    assert names[0] == "exact" and len(set(names)) == len(names)
    assert all(0 < c.epochs < float("inf") for c in advice.MEASURED)
    assert not any(c.stale or c.settings.get("staleness") or c.settings.get("skip_threshold")
                   for c in advice.MEASURED)


def test_blocks_per_epoch_follow_the_layers_choice_of_width():
    widths = advice.layer_widths(128, 128, 8, 3)
    assert widths == [(128, 128), (128, 128), (128, 8)]
    assert advice.wire_widths(widths, input_cache=True) == ([128, 8], [128, 8])  # layer 0's rows travel once
    assert advice.wire_widths(widths, input_cache=False) == ([128, 128, 8], [128, 8])  # and need no gradient
    assert advice.wire_widths(advice.layer_widths(500, 16, 3, 2), True) == ([16, 3], [16, 3])  # 500 > 2 x 16: XW


def test_wire_time_is_the_busier_interface_of_each_block():
    ex = SimpleNamespace(rank=0, send_counts=[0, 100, 300], recv_counts=[0, 50, 50])
    links = {(0, 1): (1e-8, 1e-4), (0, 2): (2e-8, 1e-4), (1, 0): (1e-8, 1e-4), (2, 0): (1e-8, 1e-4)}
    out = 1e-8 * 100 * 64 * 4 + 1e-4 + 2e-8 * 300 * 64 * 4 + 1e-4  # egress: both links, each at its speed
    assert advice.comm_seconds(ex, links, [64], "fp32") == pytest.approx(out)
    int4 = codec.wire_bytes(300, 64, "int4")
    assert advice.comm_seconds(ex, links, [64, 64], "int4") == pytest.approx(
        2 * (1e-8 * codec.wire_bytes(100, 64, "int4") + 2e-8 * int4 + 2e-4))


@pytest.mark.parametrize("flags", [["--codec", "int8"]] + [  # the rest of the same refusal: the full suite's
    pytest.param(f, marks=pytest.mark.slow) for f in (["--stale-form", "correct"], ["--stale-momentum", "0"],
                                                      ["--stale-grads", "same"], ["--stale-bound", "0.1"])])
def test_auto_refuses_hand_set_policies_in_one_line(tmp_path, flags):
    """auto would drop them: a --stale-* flag given with it is refused, not silently ignored."""
    r = run_cli("train", "--partition", str(tmp_path), "--exchange", "auto", *flags)
    one_error_line(r, "--exchange auto picks the codec")


@pytest.mark.parametrize("flags", [["--stale-bound", "nan"], ["--stale-bound", "-1"], ["--skip-threshold", "nan"],
                                   ["--stale-warmup", "-2"]])
def test_bad_stale_and_skip_values_are_refused_in_one_line(tmp_path, flags):
    """NaN passes a `< 0` test: the bound would never trigger and the threshold would skip every row."""
    one_error_line(run_cli("train", "--partition", str(tmp_path), *flags), "required")


@pytest.mark.slow  # a one-part training run (~5 s): the fast subset keeps the flag refusals
def test_auto_on_one_part_says_there_is_nothing_to_choose(tmp_path):
    part = cli_partition(tmp_path, "karate", 1)
    r = run_cli("train", "--partition", str(part), "--exchange", "auto", "--epochs", "2", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "--exchange auto: exact (no part has halo rows" in r.stderr, r.stderr


@pytest.mark.slow  # a multi-rank launch
def test_auto_says_what_it_picked_and_trains(tmp_path):
    part = cli_partition(tmp_path, "cora", 2)
    r = run_mpi(2, "train", "--partition", part, "--exchange", "auto", "--epochs", "3", "--quiet")
    lines = [ln for ln in r.stderr.splitlines() if "--exchange auto:" in ln]
    assert len(lines) == 1 and any(f"auto: {c.name} " in lines[0] for c in advice.MEASURED), r.stderr
    assert "final epoch 3/3" in r.stdout


def test_a_resumed_run_takes_the_setting_its_checkpoint_was_trained_with():
    """Timings differ between runs, so auto may choose otherwise on --resume: it takes the checkpoint's."""
    links = {(0, 0): (1e-9, 1e-5)}

    def chosen(name: str, counts: int = 5) -> HaloExchange:
        ex = HaloExchange(HaloPlan(torch.arange(0, 2 * counts, 2), [counts], [counts]), Wire(), ExchangeConfig())
        advice.apply(ex, next(c for c in advice.MEASURED if c.name == name), links)
        return ex

    then = chosen("adaptive")
    state = {"plan": [then.send_counts, then.recv_counts], "settings": policy_state.settings(then)}
    now = chosen("exact")
    assert advice.adopt(now, state) == "adaptive" and now.config.codec == "adaptive" and now.policy is not None
    assert policy_state.mismatch(now, state) is None
    elsewhere = chosen("exact", counts=4)  # another partition: no candidate fits, nothing changes
    assert advice.adopt(elsewhere, state) is None and elsewhere.config.codec == "fp32" and elsewhere.policy is None


@pytest.mark.slow  # two multi-rank launches
def test_auto_resumes_with_the_checkpoints_setting(tmp_path):
    part = cli_partition(tmp_path, "karate", 2)
    common = ["train", "--partition", str(part), "--checkpoint-dir", str(tmp_path / "ck"), "--quiet"]
    r = run_mpi(2, *common, "--codec", "adaptive", "--epochs", "2", "--checkpoint-every", "2")
    assert r.returncode == 0, r.stderr
    r = run_mpi(2, *common, "--exchange", "auto", "--epochs", "4", "--resume")  # karate's wire: auto says exact
    assert r.returncode == 0 and "auto: exact (" in r.stderr, r.stderr
    assert "--exchange auto: adaptive, as the checkpoint was trained" in r.stderr, r.stderr
    assert "starts afresh" not in r.stderr, r.stderr
