"""The CUDA kernels (Triton), proven on CPU: Triton's interpreter runs them on CPU tensors, bit for bit against the
numba kernels (what the CPU codec and keyed dropout run) and torch's forms; their compiled PTX for an H100/H200 is
checked for the two things the interpreter cannot show (FMA contraction, approximate division).

tests/test_gpu.py runs the same comparisons with the compiled kernels on a GPU.
"""
from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest
import torch

pytest.importorskip("triton", minversion="3.6")  # gnn_dist.runtime.kernels.TRITON_MIN: the `kernels` extra

from gnn_dist.nn import dropout  # noqa: E402
from gnn_dist.runtime import codec, kernels  # noqa: E402

pytestmark = [pytest.mark.skipif(not kernels.available(), reason="numba (the reference) not installed"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]  # numpy, in the interpreter, on NaN rows
SHAPES = [(40, 1), (66000, 1), (300, 7), (9400, 7), (120, 37), (1800, 37), (60, 128), (520, 128)]  # n * w <> 2^16
# every bit-width at every shape, but 1-wide rows past the table once: such a row is constant, its codes all 0
CASES = [(b, n, w) for n, w in SHAPES for b in codec.INT_BITS if not (w == 1 and n > 65536 and b != 8)]


@pytest.fixture(scope="module")
def tk():
    """triton_kernels with interpreted kernels (TRITON_INTERPRET=1 only while it loads)."""
    from gnn_dist.runtime import triton_kernels

    tk = triton_kernels.interpreted()
    tk.NARROW_TILE = 2048  # the interpreter pays per program: programs four times the GPU.s for odd narrow rows
    return tk


@pytest.fixture()
def on_triton(tk, monkeypatch):
    """Route the codec's and keyed dropout's CUDA dispatch to the interpreted kernels, for CPU tensors."""
    monkeypatch.setattr(codec, "_triton", lambda x: True)
    monkeypatch.setattr(dropout, "_keyed_on_gpu", lambda x: True)
    monkeypatch.setattr(kernels, "triton", lambda: tk)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32 if t.element_size() == 4 else torch.uint8)


def _rows(n: int, w: int, seed: int) -> torch.Tensor:
    """Random rows at several scales, with a NaN row, constant rows (zero and not) and a row holding +inf."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, w, generator=g) * torch.logspace(-4, 3, n).unsqueeze(1)
    x[min(3, n - 1)] = 2.5
    if n > 8:
        x[5] = 0.0
        x[6, w // 2] = float("nan")
        x[7, 0] = float("inf")
    return x


def test_tables_agree(tk):
    assert tk.DITHER_TABLE == kernels.load().DITHER_TABLE


@pytest.mark.parametrize("w", [1, 7, 37, 128])
def test_keyed_dropout_draws_numbas_mask_and_products(tk, on_triton, w):
    n = 1000 // w + 9
    x = torch.randn(n, w, generator=torch.Generator().manual_seed(w))
    ids = torch.randperm(10**6)[:n] * 5000  # ids * width beyond 2^32: the hash sees the low 32 bits alike
    for key, p in ((2**63 + 12345, 0.4), (7, 0.9)):
        got = dropout.keyed_dropout(x, ids, p, key)  # through the CUDA dispatch, onto the interpreted kernel
        want = torch.empty_like(x)
        kernels.load().keyed_dropout_rows(0, n, x.numpy(), want.numpy(), ids.numpy(), dropout._drop_below(p),
                                          1.0 / (1.0 - p), np.uint64(key))
        assert torch.equal(_bits(got), _bits(want))
        torch_form = _torch_keyed(x, ids, p, key)
        assert torch.equal(got, torch_form) and torch.equal(got != 0, torch_form != 0)  # same mask; +-0.0 aside
    kept = float((got != 0).float().mean())
    assert abs(kept - 0.1) < 4 * math.sqrt(0.09 / got.numel())


def _torch_keyed(x, ids, p, key):
    saved = dropout._keyed_on_gpu, dropout.BACKEND
    dropout._keyed_on_gpu, dropout.BACKEND = (lambda t: False), "torch"
    try:
        return dropout.keyed_dropout(x, ids, p, key)
    finally:
        dropout._keyed_on_gpu, dropout.BACKEND = saved


def _cpu(fn, *args, **kw):
    """Run a codec function on its CPU path (numba), the dispatch to Triton switched off."""
    saved = codec._triton
    codec._triton = lambda x: False
    try:
        return fn(*args, **kw)
    finally:
        codec._triton = saved


@pytest.mark.parametrize("bits,n,w", CASES)
def test_encode_and_decode_match_numba_bit_for_bit(on_triton, monkeypatch, tk, bits, n, w):
    if n * w > 65536:  # fewer, larger programs (the interpreter pays per program); small blocks keep the GPU's tiles
        monkeypatch.setattr(tk, "TILE", 1 << 16)
        monkeypatch.setattr(tk, "MAX_BLOCK_R", 4096)
        monkeypatch.setattr(tk, "NARROW_TILE", 1 << 16)
    x = _rows(n, w, seed=n * w + bits)
    idx = torch.randint(0, n, (n * 3 // 4 + 1,), generator=torch.Generator().manual_seed(bits))  # repeats, any order
    name = f"int{bits}"
    for index in (idx, None):
        want, want_scale = _cpu(codec.encode_rows, x, name, w, index=index)
        got, got_scale = codec.encode_rows(x, name, w, index=index)
        assert torch.equal(got, want), _first_difference(got, want)
        assert torch.equal(_bits(got_scale), _bits(want_scale))
    dec = codec.decode_rows(got, name, w)
    assert torch.equal(_bits(dec), _bits(_cpu(codec.decode_rows, got, name, w)))
    target = torch.randn(n + 5, w)
    dest = torch.randperm(n + 5)[:n]  # the exchange's gradient rows: distinct
    want_sum = _cpu(codec.decode_rows_add, got, name, w, target.clone(), dest)
    assert torch.equal(_bits(codec.decode_rows_add(got, name, w, target.clone(), dest)), _bits(want_sum))


def _first_difference(a: torch.Tensor, b: torch.Tensor) -> str:
    bad = (a != b).nonzero()
    return f"{bad.shape[0]} bytes differ, first at {bad[0].tolist()}" if bad.shape[0] else ""


def test_wide_rows_past_one_tile_and_single_rows(tk):
    """Rows wider than a program's column block loop over chunks; one-row blocks and a 1-wide row."""
    for n, w in ((3, 5000), (1, 1), (1, 300)):
        x = _rows(n, w, seed=w)
        for bits in codec.INT_BITS:
            pw = codec.packed_width(w, bits)
            want = torch.empty(n * (pw + 8), dtype=torch.uint8)
            scale = _cpu(codec.encode_rows, x, f"int{bits}", 1, out=want)[1]
            got = torch.empty_like(want)
            assert torch.equal(_bits(tk.encode_rows(x, None, bits, 1, got)),
                               _bits(scale))
            assert torch.equal(got, want)
            out = tk.decode_rows(got, bits, torch.empty(n, w))
            assert torch.equal(_bits(out), _bits(_cpu(codec.decode_rows, want, f"int{bits}", w)))


def test_a_send_buffer_of_several_peers_and_codecs(on_triton):
    """encode_split writes every peer's block at its offset, float codecs and empty blocks between; the shared-row
    path (`distinct`) too; received blocks decode and add up as on the CPU."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(700, 40, generator=g)
    x[11] = float("nan")
    splits, names = [90, 0, 120, 60, 200, 30, 150], ["int8", "int4", "fp16", "int2", "int4", "fp32", "int8"]
    index = torch.randint(0, 700, (sum(splits),), generator=g)
    rows, inverse = torch.unique(index, return_inverse=True)
    nbytes = sum(codec.wire_bytes(r, 40, c) for r, c in zip(splits, names))
    for distinct in (None, (rows, inverse)):
        want = torch.zeros(nbytes, dtype=torch.uint8)
        want_scales = _cpu(codec.encode_split, x, index, splits, names, want, 9, distinct)
        got = torch.zeros(nbytes, dtype=torch.uint8)
        scales = codec.encode_split(x, index, splits, names, got, 9, distinct)
        assert torch.equal(got, want), _first_difference(got, want)
        assert all((a is None and b is None) or torch.equal(_bits(a), _bits(b)) for a, b in zip(scales, want_scales))
    chunks = torch.split(got, [codec.wire_bytes(r, 40, c) for r, c in zip(splits, names)])
    target, dest = torch.randn(900, 40), torch.randperm(900)[: sum(splits)]
    expect = target.clone()
    for chunk, name, idx in zip(chunks, names, torch.split(dest, splits)):
        codec.decode_rows_add(chunk, name, 40, target, idx)
        _cpu(codec.decode_rows_add, chunk, name, 40, expect, idx)
    assert torch.equal(_bits(target), _bits(expect))


def test_rows_of_signed_zeros_and_infinities_decode_alike(tk):
    """The documented record differences (the sign of a zero range end; infinities in narrow rows): the codes and
    the decoded values still agree with numba's."""
    x = torch.tensor([[0.0, -0.0, 1.0, 2.0], [-0.0, 0.0, -1.0, -0.0], [0.0, -0.0, 0.0, -0.0],
                      [float("inf"), -float("inf"), 1.0, 0.0], [float("inf"), 3.0, 1.0, 0.0]])
    for bits in codec.INT_BITS:
        pw = codec.packed_width(4, bits)
        want = torch.empty(5, pw + 8, dtype=torch.uint8)
        _cpu(codec.encode_rows, x, f"int{bits}", 2, out=want)
        got = torch.empty_like(want)
        tk.encode_rows(x, None, bits, 2, got)
        assert torch.equal(got[:, :pw], want[:, :pw])
        a, b = tk.decode_rows(got, bits, torch.empty(5, 4)), _cpu(codec.decode_rows, want, f"int{bits}", 4)
        assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


def test_compiled_kernels_round_every_operation_as_numba():
    """Compile for sm_90 (no GPU needed: Triton carries ptxas) and read the PTX: no fused multiply-add, no approximate
    division, every f32 product and sum rounded on its own (`.rn`, which ptxas may not contract)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("TRITON_INTERPRET=1 in the environment: nothing compiles")
    from gnn_dist.runtime import triton_kernels as tk

    for ptx in _ptx(tk):
        ops = re.findall(r"^\s*(?:@!?%p\d+\s+)?((?:fma|mad|mul|add|sub|div|rcp|sqrt)\.[\w.]*f32)\b", ptx, re.M)
        bad = [op for op in ops if op.startswith(("fma", "mad", "rcp", "sqrt")) or ".rn." not in op]
        assert ops and not bad, sorted(set(bad))


def _ptx(tk) -> list[str]:
    import triton
    from triton.backends.compiler import GPUTarget

    ints = {"n": "i32", "w": "i32", "pw": "i32"}
    cases = [(tk._keyed_dropout_kernel, {"x_ptr": "*fp32", "ids_ptr": "*i64", "out_ptr": "*fp32", "n": "i32", "w": "i32",
                                         "stride_x": "i32", "key": "i32", "drop_below": "i32", "scale": "fp32"},
              {"BLOCK_R": 32, "BLOCK_W": 128, "CHUNKS": 1, "ALIGN": 4}),
             (tk._encode_kernel, {"x_ptr": "*fp32", "idx_ptr": "*i64", "out_ptr": "*u8", "scale_ptr": "*fp32", **ints,
                                  "stride_x": "i32", "key": "i32"},
              {"BITS": 4, "HAS_IDX": True, "BLOCK_R": 32, "BLOCK_K": 64, "CHUNKS": 1, "ALIGN": 4}),
             (tk._decode_kernel, {"rec_ptr": "*u8", "out_ptr": "*fp32", "idx_ptr": "*i64", **ints, "stride_o": "i32"},
              {"BITS": 4, "HAS_IDX": True, "ADD": True, "BLOCK_R": 32, "BLOCK_K": 64, "CHUNKS": 1, "ALIGN": 4})]
    out = []
    for fn, sig, consts in cases:
        src = triton.compiler.ASTSource(fn=fn, signature={**sig, **{k: "constexpr" for k in consts}}, constexprs=consts)
        out.append(triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(tk.LAUNCH)).asm["ptx"])
    return out
