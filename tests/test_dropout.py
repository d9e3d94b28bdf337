"""Hash dropout: F.dropout's contract (keep rate, scale, gradient), repeatable under a seed."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from gnn_dist.nn.dropout import HashDropout, dropout
from gnn_dist.runtime import kernels, tuning

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba not installed")


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_rate_scale_and_gradient(p):
    x = torch.randn(300, 77, requires_grad=True)
    torch.manual_seed(1)
    out = HashDropout.apply(x, p)
    kept = out != 0
    n = kept.numel()
    z = (kept.sum().item() - n * (1 - p)) / math.sqrt(n * p * (1 - p))
    assert abs(z) < 4.0, z  # the keep rate is 1 - p
    assert torch.equal(out[kept], x.detach()[kept] * (1.0 / (1.0 - p)))
    g = torch.randn_like(out)
    out.backward(g)
    assert torch.equal(x.grad, g * kept * (1.0 / (1.0 - p)))


def test_masks_repeat_under_a_seed_and_differ_between_calls():
    x = torch.randn(1000, 16)
    torch.manual_seed(7)
    a, b = dropout(x, 0.5, True), dropout(x, 0.5, True)
    torch.manual_seed(7)
    assert torch.equal(dropout(x, 0.5, True), a)
    assert not torch.equal(a != 0, b != 0)
    assert (a != 0).float().mul((b != 0).float()).mean().item() == pytest.approx(0.25, abs=0.02)  # independent


def test_unbiased_and_pass_through_cases():
    """The mean of n draws is x within 6 standard errors per element (x sqrt(p / (1 - p) / n)); seeded, so it
    repeats exactly (unseeded, the fixed bound of 0.1 it had failed for 6 seeds of 200)."""
    torch.manual_seed(7)
    x = torch.randn(64, 8)
    p, n = 0.3, 3000
    mean = torch.stack([dropout(x, p, True) for _ in range(n)]).mean(0)
    assert ((mean - x).abs() <= 6 * x.abs() * math.sqrt(p / (1 - p) / n) + 1e-6).all()
    assert dropout(x, 0.5, False) is x and dropout(x, 0.0, True) is x
    d = dropout(x.double(), 0.5, True)  # not float32: torch's own dropout
    assert d.dtype == torch.float64


def test_keyed_dropout_torch_twin_draws_the_kernels_masks_bit_for_bit(monkeypatch):
    from gnn_dist.nn import dropout as mod

    x = torch.randn(300, 33)
    ids = torch.randperm(10**6)[:300] * 5000  # ids * width beyond 2^32: the hash sees the low 32 bits alike
    monkeypatch.setattr(tuning, "NUMBA_MIN_ELEMENTS", 0)
    fused_out = mod.keyed_dropout(x, ids, 0.4, key=2**63 + 12345)
    monkeypatch.setattr(tuning.ENV, "dropout_backend", "torch")
    assert torch.equal(mod.keyed_dropout(x, ids, 0.4, key=2**63 + 12345), fused_out)
    kept = fused_out != 0
    n = kept.numel()
    z = (kept.sum().item() - n * 0.6) / math.sqrt(n * 0.24)
    assert abs(z) < 4.0, z
    assert torch.equal(fused_out[kept], x[kept] * (1.0 / 0.6))


@pytest.mark.parametrize("p", [0.3, 0.5])
def test_small_tensors_draw_the_kernels_masks_in_torch_without_loading_numba(monkeypatch, p):
    """Below tuning.NUMBA_MIN_ELEMENTS, dropout runs the kernel's hash in torch: the same masks, outputs and gradients."""
    x = torch.randn(3000, 7, requires_grad=True)
    runs = []
    for min_items in (0, 1 << 62):
        monkeypatch.setattr(tuning, "NUMBA_MIN_ELEMENTS", min_items)
        torch.manual_seed(3)
        y = HashDropout.apply(x, p)
        (g,) = torch.autograd.grad((y * torch.arange(7.0)).sum(), x)
        runs.append((y, g))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    code = ("import sys, torch; from gnn_dist.nn.dropout import dropout, keyed_dropout; x = torch.randn(200, 16); "
            "dropout(x, 0.5, True); keyed_dropout(x, torch.arange(200), 0.5, key=3); print('numba' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_keyed_masks_follow_the_node_not_the_row_and_change_with_the_key():
    from gnn_dist.nn.dropout import keyed_dropout

    x = torch.ones(500, 16)
    ids = torch.arange(500) * 7
    perm = torch.randperm(500)
    a = keyed_dropout(x, ids, 0.5, key=1)
    assert torch.equal(keyed_dropout(x[perm], ids[perm], 0.5, key=1), a[perm])  # same node, same mask
    b = keyed_dropout(x, ids, 0.5, key=2)
    assert (a != 0).float().mul((b != 0).float()).mean().item() == pytest.approx(0.25, abs=0.02)
    assert keyed_dropout(x, ids, 0.0, key=1) is x


@pytest.mark.skipif(not kernels.available(), reason="numba not installed")
def test_kernels_split_over_threads_give_the_same_bits(monkeypatch):
    """Dropout's kernels run over ranges of elements on torch's threads; any split draws the same masks."""
    x = torch.randn(3000, 40, requires_grad=True)
    results = []
    for min_chunk, threads in ((1 << 62, 1), (1000, 2), (1000, 3)):
        monkeypatch.setattr(tuning, "THREAD_MIN_ELEMENTS", min_chunk)
        monkeypatch.setattr(torch, "get_num_threads", lambda t=threads: t)
        torch.manual_seed(7)
        y = HashDropout.apply(x, 0.3)
        (g,) = torch.autograd.grad((y * torch.arange(40.0)).sum(), x)
        results.append((y.detach(), g))
    for y, g in results[1:]:
        assert torch.equal(y, results[0][0]) and torch.equal(g, results[0][1])
    y, g = results[0]
    torch.testing.assert_close(g, (y != 0).float() * torch.arange(40.0) / 0.7)  # backward keeps what forward kept


@pytest.mark.parametrize("min_items", [0, 1 << 62])  # the numba kernel, then its torch form
def test_relu_dropout_is_dropout_of_relu_bit_for_bit_with_gradients(monkeypatch, min_items):
    from gnn_dist.nn.dropout import relu_dropout

    monkeypatch.setattr(tuning, "NUMBA_MIN_ELEMENTS", min_items)
    x0 = torch.randn(500, 24)
    x0[0, :3] = torch.tensor([0.0, -0.0, float("nan")])
    weights = torch.randn(24)
    runs = []
    for fused in (True, False):
        x = x0.clone().requires_grad_()
        torch.manual_seed(5)
        y = relu_dropout(x, 0.4, True) if fused else dropout(torch.relu(x), 0.4, True)
        (g,) = torch.autograd.grad((y * weights).sum(), x)  # a NaN row still passes gradients
        runs.append((y, g))
    (y1, g1), (y2, g2) = runs
    assert torch.equal(y1.nan_to_num(), y2.nan_to_num()) and torch.equal(y1.isnan(), y2.isnan())
    assert torch.equal(y1.signbit(), y2.signbit())  # -0.0 passes ReLU as in torch
    assert torch.equal(g1, g2)
    assert not torch.equal(relu_dropout(x0, 0.4, False).nan_to_num(), y1.nan_to_num())  # eval: ReLU alone
    assert torch.equal(relu_dropout(x0, 0.4, False).nan_to_num(), torch.relu(x0).nan_to_num())
