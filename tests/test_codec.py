"""Codecs: exact packing, unbiased stochastic rounding, variance as theory says, degenerate rows survive."""
from __future__ import annotations

import math

import pytest
import torch

from gnn_dist.runtime import codec, kernels, streams, tuning
from gnn_dist.runtime.exchange import adaptive

BACKENDS = ["torch", pytest.param("fused", marks=pytest.mark.skipif(not kernels.available(),
                                                                   reason="numba not installed"))]


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    """Run a test once with the torch expressions and once with the fused numba kernels."""
    monkeypatch.setattr(tuning.ENV, "codec_backend", request.param)
    return request.param


@pytest.mark.parametrize("bits", codec.INT_BITS)
@pytest.mark.parametrize("width", [1, 3, 7, 16, 33])
def test_pack_round_trips_exactly(bits, width):
    g = torch.Generator().manual_seed(bits * 100 + width)
    q = torch.randint(0, 2**bits, (11, width), generator=g, dtype=torch.uint8)
    p = codec.pack(q, bits)
    assert p.shape == (11, codec.packed_width(width, bits))
    assert torch.equal(codec.unpack(p, bits, width), q)


@pytest.mark.parametrize("bits", codec.INT_BITS)
def test_decoding_is_unbiased_and_variance_matches_theory(bits, backend):
    g = torch.Generator().manual_seed(bits)
    x = torch.randn(40, 24, generator=g) * torch.logspace(-3, 1, 40).unsqueeze(1)
    trials = 2000
    err_sum = torch.zeros_like(x, dtype=torch.float64)
    sq_sum = torch.zeros_like(x, dtype=torch.float64)
    for trial in range(trials):
        d = codec.decode(codec.encode(x, f"int{bits}", key=1000 * bits + trial)).double() - x.double()
        err_sum += d
        sq_sum += d * d
    var = adaptive.rounding_variance(x, bits)
    # aggregate z-test: the summed error of all elements and trials against its theoretical spread
    z = err_sum.sum() / math.sqrt(trials * var.sum())
    assert abs(z) < 4.0, z
    emp = sq_sum.sum() / trials
    assert abs(emp / var.sum() - 1) < 0.10, (emp, var.sum())


@pytest.mark.parametrize("bits", codec.INT_BITS)
def test_constant_rows_and_tiny_gradients_survive(bits, backend):
    x = torch.stack([torch.full((9,), 3.25), torch.zeros(9), torch.linspace(-1e-8, 1e-8, 9)])
    e = codec.encode(x, f"int{bits}", key=0)
    d = codec.decode(e)
    assert torch.equal(d[0], x[0]) and torch.equal(d[1], x[1])
    assert torch.equal(e.payload[:2], torch.zeros_like(e.payload[:2]))
    step = 2e-8 / (2**bits - 1)
    assert ((d[2] - x[2]).abs() <= step * 1.0001).all()
    assert torch.isfinite(d).all()


def test_wire_bytes_match_what_is_sent():
    x = torch.randn(13, 10)
    for name in codec.CODECS:
        assert codec.encode(x, name).nbytes() == codec.wire_bytes(13, 10, name)


def test_float_codecs_round_trip():
    x = torch.randn(5, 6)
    assert torch.equal(codec.decode(codec.encode(x, "fp32")), x)
    assert torch.allclose(codec.decode(codec.encode(x, "bf16")), x, rtol=1e-2)


@pytest.mark.skipif(not kernels.available(), reason="numba not installed")
@pytest.mark.parametrize("bits", codec.INT_BITS)
@pytest.mark.parametrize("width", [1, 5, 64])
def test_fused_and_torch_write_the_same_bytes(bits, width, monkeypatch):
    """Either side of a link may use either implementation: same packing, same decoded values."""
    x = torch.randn(50, width, generator=torch.Generator().manual_seed(width))
    monkeypatch.setattr(tuning.ENV, "codec_backend", "fused")
    rows, scale = codec.encode_rows(x, f"int{bits}", key=1)
    e = codec.from_rows(rows, f"int{bits}", width)
    decoded = codec.decode_rows(rows, f"int{bits}", width)
    codes = ((decoded - e.lo.unsqueeze(1)) / torch.where(scale == 0, 1.0, scale).unsqueeze(1)).round().to(torch.uint8)
    assert torch.equal(codec.pack(codes, bits), e.payload)  # the fused kernel packs as `pack` does
    monkeypatch.setattr(tuning.ENV, "codec_backend", "torch")
    assert torch.equal(codec.decode_rows(rows, f"int{bits}", width), decoded)
    other, _ = codec.encode_rows(x, f"int{bits}")
    by_torch = codec.decode_rows(other, f"int{bits}", width)
    monkeypatch.setattr(tuning.ENV, "codec_backend", "fused")
    assert torch.equal(codec.decode_rows(other, f"int{bits}", width), by_torch)


@pytest.mark.parametrize("bits", codec.INT_BITS)
def test_encoding_through_an_index_equals_encoding_the_gathered_rows(bits, backend):
    """The exchange encodes its send rows straight from x through send_idx: same bytes as gathering first."""
    x = torch.randn(40, 9)
    idx = torch.tensor([5, 0, 39, 5, 17])
    a, _ = codec.encode_rows(x, f"int{bits}", key=3, index=idx)
    b, _ = codec.encode_rows(x[idx], f"int{bits}", key=3)
    assert torch.equal(a, b)


@pytest.mark.parametrize("bits", codec.INT_BITS)
def test_a_key_repeats_its_dither_and_another_key_does_not(bits, backend):
    """The exchange hands each encode a key from the epoch's dither stream: a resumed epoch must round alike."""
    x = torch.randn(64, 33, generator=torch.Generator().manual_seed(bits))
    a, b, c = (codec.encode_rows(x, f"int{bits}", key=k)[0] for k in (7, 7, 8))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("bits", codec.INT_BITS)
def test_decoding_into_a_sum_equals_decoding_then_index_add(bits, backend):
    """Backward sums received gradients straight into the inner-row gradient: same floats as decode + index_add_."""
    x = torch.randn(6, 10, generator=torch.Generator().manual_seed(bits))
    rows, _ = codec.encode_rows(x, f"int{bits}", key=1)
    idx = torch.tensor([3, 0, 7, 3, 1, 6])  # a row may repeat (sent by two peers)
    base = torch.randn(8, 10)
    want = base.clone().index_add_(0, idx, codec.decode_rows(rows, f"int{bits}", 10))
    got = codec.decode_rows_add(rows, f"int{bits}", 10, base.clone(), idx)
    assert torch.equal(got, want)


@pytest.mark.parametrize("width", [8, 64])
def test_a_nan_anywhere_in_a_row_reaches_the_receiver(width, backend):
    """Quantising must not launder a NaN into finite garbage: the trainer's NaN check has to see it."""
    x = torch.randn(4, width)
    x[1, 3] = float("nan")
    rows, _ = codec.encode_rows(x, "int4", key=0)
    d = codec.decode_rows(rows, "int4", width)
    assert torch.isnan(d[1]).any() and not torch.isnan(d[[0, 2, 3]]).any()


@pytest.mark.parametrize("bits", codec.INT_BITS)
def test_a_row_sent_to_several_peers_is_encoded_once(bits, backend):
    """encode_split with `distinct`: blocks sharing a codec carry the distinct rows' records, copied;
    a block with a codec of its own is encoded as without `distinct`."""
    x = torch.randn(30, 12)
    index = torch.tensor([4, 9, 2, 9, 4, 17, 2, 25, 9, 4])  # 3 blocks; rows 4, 9 and 2 go to several
    splits, names = [3, 4, 3], [f"int{bits}", f"int{bits}", "int8" if bits != 8 else "int4"]
    nbytes = [codec.wire_bytes(r, 12, n) for r, n in zip(splits, names)]
    out = torch.empty(sum(nbytes), dtype=torch.uint8)
    scales = codec.encode_split(x, index, splits, names, out, key=0,
                                distinct=torch.unique(index, return_inverse=True))
    blocks = torch.split(out, nbytes)
    decoded = [codec.decode_rows(b, n, 12) for b, n in zip(blocks, names)]
    for a, b in ((0, 1), (1, 0), (2, 3)):  # rows 4, 9, 2: one record each, in both blocks
        assert torch.equal(decoded[0][a], decoded[1][b]) and torch.equal(scales[0][a], scales[1][b])
    for d, idx, name in zip(decoded, torch.split(index, splits), names):
        step = (x.amax(1) - x.amin(1)) / (2 ** int(name[3:]) - 1)
        assert ((d - x[idx]).abs() <= step[idx, None] * 1.001 + 1e-6).all()
    # the lone codec's block: encoded directly, under the key encode_split derives for block 2
    single, _ = codec.encode_rows(x, names[2], key=streams.derive(0, 2), index=index[7:])
    assert torch.equal(blocks[2], single.flatten())
