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
from gnn_dist.runtime import codec, kernels, tuning  # noqa: E402

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
    """Route the codec's and keyed dropout's CUDA dispatch to the interpreted kernels, for CPU tensors; the test
    fails (at teardown) if no Triton kernel ran, so a comparison cannot pass on torch's or numba's path."""
    monkeypatch.setattr(codec, "_triton", lambda x: True)
    monkeypatch.setattr(dropout, "_keyed_on_gpu", lambda x: True)
    monkeypatch.setattr(kernels, "triton", lambda: tk)
    before = sum(tk.LAUNCHES.values())
    yield
    assert sum(tk.LAUNCHES.values()) > before, "no Triton kernel ran: the test compared another path with itself"


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
    assert tk._TABLE.value == kernels.load().DITHER_TABLE_VALUES  # the one table, as each kernel reads it
    assert tk.BITS == codec.INT_BITS


@pytest.mark.parametrize("w", [1, 7, 37, 128])
def test_keyed_dropout_draws_numbas_mask_and_products(tk, on_triton, w):
    n = 1000 // w + 9
    x = torch.randn(n, w, generator=torch.Generator().manual_seed(w))
    ids = torch.randperm(10**6)[:n] * 5000  # ids * width beyond 2^32: the hash sees the low 32 bits alike
    for key, p in ((2**63 + 12345, 0.4), (7, 0.9)):
        launched = tk.LAUNCHES[tk._variant("keyed_dropout")]
        got = dropout.keyed_dropout(x, ids, p, key)  # through the CUDA dispatch, onto the interpreted kernel
        assert tk.LAUNCHES[tk._variant("keyed_dropout")] == launched + 1  # Triton drew it, not torch's form
        want = torch.empty_like(x)
        kernels.load().keyed_dropout_rows(0, n, x.numpy(), want.numpy(), ids.numpy(), dropout._drop_below(p),
                                          1.0 / (1.0 - p), np.uint64(key))
        assert torch.equal(_bits(got), _bits(want))
        torch_form = _torch_keyed(x, ids, p, key)
        assert torch.equal(got, torch_form) and torch.equal(got != 0, torch_form != 0)  # same mask; +-0.0 aside
    kept = float((got != 0).float().mean())
    assert abs(kept - 0.1) < 4 * math.sqrt(0.09 / got.numel())


def _torch_keyed(x, ids, p, key):
    saved = dropout._keyed_on_gpu, tuning.ENV.dropout_backend
    dropout._keyed_on_gpu, tuning.ENV.dropout_backend = (lambda t: False), "torch"
    try:
        return dropout.keyed_dropout(x, ids, p, key)
    finally:
        dropout._keyed_on_gpu, tuning.ENV.dropout_backend = saved


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
    """Compile for sm_90 (no GPU needed: Triton carries ptxas) every variant training can launch (`variants`: each
    kernel at every combination of BITS, HAS_IDX and ADD), at a narrow odd width's tiles and at an aligned wide
    one's, and read the PTX: no fused multiply-add, no approximate division, every f32 product and sum rounded
    on its own (`.rn`, which ptxas may not contract)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("TRITON_INTERPRET=1 in the environment: nothing compiles")
    from gnn_dist.runtime import triton_kernels as tk

    compiled = _ptx(tk)
    assert {key for key, _ in compiled} == set(tk.variants())
    for (key, width), ptx in compiled.items():
        ops = re.findall(r"^\s*(?:@!?%p\d+\s+)?((?:fma|mad|mul|add|sub|div|rcp|sqrt)\.[\w.]*f32)\b", ptx, re.M)
        bad = [op for op in ops if op.startswith(("fma", "mad", "rcp", "sqrt")) or ".rn." not in op]
        assert ops and not bad, (key, width, sorted(set(bad)))


PTX_WIDTHS = (37, 128)  # one-warp tiles of single values (odd widths), and 16-aligned rows of 8-warp tiles
SIGNATURES = {"keyed_dropout": {"x_ptr": "*fp32", "ids_ptr": "*i64", "out_ptr": "*fp32", "n": "i32", "w": "i32",
                                "stride_x": "i32", "key": "i32", "drop_below": "i32", "scale": "fp32"},
              "encode": {"x_ptr": "*fp32", "idx_ptr": "*i64", "out_ptr": "*u8", "scale_ptr": "*fp32", "n": "i32",
                         "w": "i32", "pw": "i32", "stride_x": "i32", "key": "i32"},
              "decode": {"rec_ptr": "*u8", "out_ptr": "*fp32", "idx_ptr": "*i64", "n": "i32", "w": "i32", "pw": "i32",
                         "stride_o": "i32"}}


def _tiles(tk, kernel: str, flags: dict, width: int) -> tuple[dict, int]:
    """The tile constexprs and warps a launch at `width` gets (what the wrappers in triton_kernels compute)."""
    if kernel == "keyed_dropout":
        align = tk._align(width, width)
        br, bw, chunks, warps = tk._tile(width, 1, align)
        return {"BLOCK_R": br, "BLOCK_W": bw, "CHUNKS": chunks, "ALIGN": align}, warps
    per = 8 // flags["BITS"]
    pw = -(-width // per)
    align = tk._align(width, pw, width)
    br, bk, chunks, warps = tk._tile(width, per, align)
    return {"BLOCK_R": br, "BLOCK_K": bk, "CHUNKS": chunks, "ALIGN": align}, warps


def _ptx(tk) -> dict[tuple, str]:
    """PTX of every variant at every PTX_WIDTHS tiling, by (variant, width)."""
    import triton
    from triton.backends.compiler import GPUTarget

    out = {}
    for key in tk.variants():
        kernel, flags = key[0], dict(key[1])
        for width in PTX_WIDTHS:
            tiles, warps = _tiles(tk, kernel, flags, width)
            consts = {**flags, **tiles}
            sig = {**SIGNATURES[kernel], **{k: "constexpr" for k in consts}}
            src = triton.compiler.ASTSource(fn=tk.KERNELS[kernel], signature=sig, constexprs=consts)
            out[key, width] = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                             options=dict(tk.LAUNCH, num_warps=warps)).asm["ptx"]
    return out


def test_every_variant_training_launches_is_one_the_ptx_check_compiles(tk, on_triton):
    """What the codec and keyed dropout launch, as the exchange calls them (encode_split with an index, without,
    and with records shared by several peers; decode_rows; decode_rows_add) is on `variants()`, and `variants()`
    enumerates every code-choosing constexpr of each kernel's signature (a new flag fails here)."""
    for kernel in tk.KERNELS:
        assert set(tk.flag_names(kernel)) <= set(tk.FLAG_VALUES), kernel
    before = tk.LAUNCHES.copy()
    g = torch.Generator().manual_seed(11)
    x = torch.randn(200, 12, generator=g)
    names = ["int8", "int4", "int2", "int8", "int4", "int2", "fp16", "fp32"]
    splits = [20, 15, 10, 25, 5, 10, 5, 5]
    index = torch.randint(0, 200, (sum(splits),), generator=g)
    nbytes = [codec.wire_bytes(r, 12, c) for r, c in zip(splits, names)]
    buf = torch.empty(sum(nbytes), dtype=torch.uint8)
    codec.encode_split(x[index], None, splits, names, buf, 3)
    codec.encode_split(x, index, splits, names, buf, 3)
    codec.encode_split(x, index, splits, names, buf, 3, torch.unique(index, return_inverse=True))
    target = torch.zeros(200, 12)
    for chunk, name, idx in zip(torch.split(buf, nbytes), names, torch.split(torch.randperm(200)[:sum(splits)], splits)):
        codec.decode_rows(chunk, name, 12)
        codec.decode_rows_add(chunk, name, 12, target, idx)
    dropout.keyed_dropout(x, torch.arange(200), 0.5, 5)
    launched = {key for key, count in tk.LAUNCHES.items() if count > before[key]}
    wanted = {tk._variant("keyed_dropout")}
    for b in codec.INT_BITS:
        wanted |= {tk._variant("encode", BITS=b, HAS_IDX=True), tk._variant("encode", BITS=b, HAS_IDX=False),
                   tk._variant("decode", BITS=b, HAS_IDX=False, ADD=False),
                   tk._variant("decode", BITS=b, HAS_IDX=True, ADD=True)}
    assert launched == wanted and launched <= set(tk.variants())


def test_per_call_integers_compile_no_new_variant():
    """Row counts and keys change from call to call: Triton must not specialise on them (a value of 1 or a
    multiple of 16 would otherwise compile another variant mid-training)."""
    from gnn_dist.runtime import triton_kernels as tk

    per_call = {"keyed_dropout": {"n", "key", "drop_below"}, "encode": {"n", "key"}, "decode": {"n"}}
    for kernel, names in per_call.items():
        assert names <= set(tk.KERNELS[kernel].do_not_specialize), kernel


def test_triton_version_read_from_the_module(monkeypatch):
    """torch's wheels install the module `triton` as the distribution pytorch-triton, with no `triton` package
    metadata: triton_available reads the module's __version__ and never raises PackageNotFoundError."""
    import importlib.machinery
    import importlib.metadata
    import sys
    import types

    fake = types.ModuleType("triton")
    fake.__spec__ = importlib.machinery.ModuleSpec("triton", None)

    def no_metadata(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", no_metadata)
    monkeypatch.setitem(sys.modules, "triton", fake)
    try:
        for version, usable in (("3.6.0+git96316ce5", True), ("3.7.1", True), ("3.5.1", False), ("2.2.0", False)):
            fake.__version__ = version
            kernels.triton_available.cache_clear()
            assert kernels.triton_available() is usable, version
    finally:
        kernels.triton_available.cache_clear()
