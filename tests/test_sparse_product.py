"""spmm's numba row kernel: the same bits as torch's CSR product, into fresh results, row blocks and sums."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gnn_dist.graph import local
from gnn_dist.graph.local import _to_torch_csr, spmm
from gnn_dist.runtime import kernels, tuning

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba is not installed")


def _operator(rows: int, cols: int, seed: int) -> torch.Tensor:
    m = sp.random(rows, cols, density=0.02, format="lil", random_state=seed, dtype="float32")
    m[3] = 0  # an empty row
    return _to_torch_csr(m.tocsr(), "cpu")


def _column_order(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """a @ x with each row summed in float32, nonzero by nonzero in column order: the kernel's contract."""
    ptr, col, val, xs = a.crow_indices().numpy(), a.col_indices().numpy(), a.values().numpy(), x.numpy()
    out = np.zeros((a.shape[0],) + xs.shape[1:], dtype=np.float32)
    for i in range(a.shape[0]):
        for k in range(ptr[i], ptr[i + 1]):
            out[i] = out[i] + val[k] * xs[col[k]]
    return torch.from_numpy(out)


@pytest.mark.parametrize("shape", [(700, 64), (700, 3), (700, 16)])
def test_kernel_sums_in_column_order_and_agrees_with_torch(monkeypatch, shape):
    """Bit for bit the column-order sum, which is MKL's CSR product on AVX2 machines; MKL's AVX-512 path fuses
    multiply-adds (and orders 4-, 8- and 16-wide rows otherwise), so torch's product agrees within rounding."""
    a = _operator(500, shape[0], seed=1)
    x = torch.randn(*shape)
    base = torch.randn(900, *shape[1:])
    runs = []
    for min_items in (0, 1 << 62):  # the kernel, then torch's product
        monkeypatch.setattr(tuning, "NUMBA_MIN_SPMM_MULTIPLY_ADDS", min_items)
        into, summed = base.clone(), base.clone()
        spmm(a, x, into[200:700])
        spmm(a, x, summed[200:700], add=True)
        runs.append((spmm(a, x), into, summed))
    ref = _column_order(a, x)
    assert torch.equal(runs[0][0], ref) and torch.equal(runs[0][1][200:700], ref)
    assert torch.equal(runs[0][2][200:700], base[200:700] + ref)
    for kernel_out, torch_out in zip(*runs):
        torch.testing.assert_close(kernel_out, torch_out, rtol=1e-5, atol=1e-6)
    assert torch.equal(runs[0][1][:200], base[:200]) and torch.equal(runs[0][1][700:], base[700:])


def test_kernel_takes_only_large_float32_cpu_products(monkeypatch):
    a = _operator(50, 40, seed=2)
    assert not local._in_numba(a, torch.randn(40, 8))  # 40 nonzeros x 8 columns: below tuning.NUMBA_MIN_SPMM_MULTIPLY_ADDS
    monkeypatch.setattr(tuning, "NUMBA_MIN_SPMM_MULTIPLY_ADDS", 0)
    assert local._in_numba(a, torch.randn(40, 8))
    assert not local._in_numba(a, torch.randn(40, 8, dtype=torch.float64))
    code = ("import sys, torch, scipy.sparse as sp; from gnn_dist.graph.local import _to_torch_csr, spmm; "
            "a = _to_torch_csr(sp.random(300, 300, density=0.02, format='csr', random_state=0), 'cpu'); "
            "spmm(a, torch.randn(300, 16)); print('numba' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
