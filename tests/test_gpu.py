"""The CUDA path: codecs on the device, the exchange on a side stream, NCCL against gloo.

Skipped where torch sees no GPU (CI is CPU-only); run on a GPU machine with
`python -m pytest tests/test_gpu.py`.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import cli_partition

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_codec_on_device_matches_cpu(bits):
    from gnn_dist.runtime import codec

    x = torch.randn(3000, 37, generator=torch.Generator().manual_seed(bits))
    dev = torch.device("cuda")
    enc = codec.encode(x.to(dev), f"int{bits}")
    assert enc.payload.is_cuda and enc.payload.dtype == torch.uint8
    back = codec.decode(codec.from_rows(codec.to_rows(enc), f"int{bits}", 37))
    assert back.is_cuda
    err = (back.cpu() - x).abs()
    assert bool((err <= enc.scale.cpu().unsqueeze(1) * (1 + 1e-5) + 1e-7).all())  # one step at most
    means = torch.stack([codec.decode(codec.encode(x.to(dev), f"int{bits}")) for _ in range(200)]).mean(0).cpu()
    assert float((means - x).abs().mean()) < 0.2 * float(enc.scale.mean())  # unbiased: the mean closes in


@pytest.fixture()
def nccl_world_of_one(tmp_path):
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("name", ["fp32", "int8"])
def test_side_stream_exchange_round_trip(nccl_world_of_one, name):
    """Rank 0 sends rows to itself through NCCL while the default stream keeps computing."""
    from gnn_dist.runtime.exchange import ExchangeConfig, HaloExchange, HaloWait

    dev = torch.device("cuda")
    send_idx = torch.arange(0, 4000, 2, device=dev)
    ex = HaloExchange(send_idx, [send_idx.numel()], [send_idx.numel()], None, ExchangeConfig(codec=name))
    x = torch.randn(4000, 64, device=dev, requires_grad=True)
    channel = ex.channel("layer", training=True)
    pending = ex.start(x, channel)
    busy = x.detach() @ torch.randn(64, 64, device=dev)  # default-stream work while the side stream sends
    halo = HaloWait.apply(x, pending, ex, channel)
    want = x.detach()[send_idx]
    if name == "fp32":
        assert torch.equal(halo, want)
    else:
        step = (want.amax(1) - want.amin(1)) / 255
        assert bool(((halo - want).abs() <= step.unsqueeze(1) * (1 + 1e-5) + 1e-7).all())
    halo.sum().backward()  # gradients go home the same way and land at send_idx
    expect = torch.zeros(4000, device=dev)
    expect[send_idx] = 1.0
    assert torch.allclose(x.grad[:, 0], expect) and busy.isfinite().all()
    assert ex.epoch_metrics()["fwd.L0"]["calls"] == 1


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason=f"NCCL needs one GPU per rank; {torch.cuda.device_count()} visible")
def test_nccl_training_matches_gloo(tmp_path):
    part = cli_partition(tmp_path, "cora", 2)
    losses = {}
    for backend in ("gloo", "nccl"):
        log = tmp_path / f"{backend}.jsonl"
        r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gnn_dist", "train", "--partition", str(part),
                            "--epochs", "20", "--quiet", "--dropout", "0", "--backend", backend, "--log", str(log)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        losses[backend] = [json.loads(ln)["loss"] for ln in log.read_text().splitlines() if '"loss"' in ln]
    assert len(losses["nccl"]) == 20
    assert max(abs(a - b) for a, b in zip(losses["gloo"], losses["nccl"])) < 1e-4


@pytest.fixture(scope="module")
def triton_kernels():
    """The compiled kernels, and an interpreted copy of them (TRITON_INTERPRET while it loads)."""
    pytest.importorskip("triton")
    from gnn_dist.runtime import kernels, triton_kernels

    if not kernels.available():
        pytest.skip("numba (the CPU reference) not installed")
    return triton_kernels, triton_kernels.interpreted()


@pytest.mark.parametrize("bits", [8, 4, 2])
@pytest.mark.parametrize("n,w", [(300, 7), (9400, 7), (1800, 37), (520, 128), (20000, 128), (3, 5000)])
def test_compiled_codec_kernels_write_the_cpus_bits(triton_kernels, bits, n, w):
    """Compiled on the device (no FMA, rounded divisions) = numba on the CPU: whole wire records, decode, decode-add."""
    from gnn_dist.runtime import codec

    compiled, interpreted = triton_kernels
    g = torch.Generator().manual_seed(n + w + bits)
    x = torch.randn(n, w, generator=g) * torch.logspace(-4, 3, n).unsqueeze(1)
    x[1], x[2, 0] = 2.5, float("nan")
    idx = torch.randint(0, n, (n * 3 // 4 + 1,), generator=g)
    name, dev = f"int{bits}", torch.device("cuda")
    for index in (idx, None):
        want, want_scale = codec.encode_rows(x, name, torch.Generator().manual_seed(7), index=index)  # numba
        got, scale = codec.encode_rows(x.to(dev), name, torch.Generator().manual_seed(7),
                                       index=None if index is None else index.to(dev))  # Triton, compiled
        assert torch.equal(got.cpu(), want) and torch.equal(scale.cpu().view(torch.int32), want_scale.view(torch.int32))
    if n * w <= 20000:  # the interpreter too, on small blocks (it is slow)
        mine = torch.empty_like(want)
        interpreted.encode_rows(x, None, bits, codec._key(torch.Generator().manual_seed(7)), mine)
        assert torch.equal(mine, want)
    dec = codec.decode_rows(got, name, w)
    assert dec.is_cuda and _same_bits(dec.cpu(), codec.decode_rows(want, name, w))
    target, dest = torch.randn(n + 5, w, generator=g), torch.randperm(n + 5, generator=g)[:n]
    expect = codec.decode_rows_add(want, name, w, target.clone(), dest)
    assert _same_bits(codec.decode_rows_add(got, name, w, target.to(dev), dest.to(dev)).cpu(), expect)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit, NaN's payload aside: the GPU's arithmetic makes its canonical NaN where x86 keeps the operand's."""
    nan = a.isnan()
    return torch.equal(nan, b.isnan()) and torch.equal(a[~nan].view(torch.int32), b[~nan].view(torch.int32))


def test_compiled_send_buffer_and_keyed_dropout_match_the_cpu(triton_kernels, monkeypatch):
    """The exchange's encode_split on the device writes the CPU's send buffer; keyed input dropout draws its masks."""
    from gnn_dist.nn import dropout
    from gnn_dist.runtime import codec, kernels

    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5000, 64, generator=g)
    splits, names = [900, 0, 1200, 600, 2000], ["int8", "int4", "fp16", "int2", "int4"]
    index = torch.randint(0, 5000, (sum(splits),), generator=g)
    nbytes = sum(codec.wire_bytes(r, 64, c) for r, c in zip(splits, names))
    want, got = torch.empty(nbytes, dtype=torch.uint8), torch.empty(nbytes, dtype=torch.uint8, device=dev)
    codec.encode_split(x, index, splits, names, want, torch.Generator().manual_seed(1))
    codec.encode_split(x.to(dev), index.to(dev), splits, names, got, torch.Generator().manual_seed(1))
    assert torch.equal(got.cpu(), want)
    monkeypatch.setattr(kernels, "NUMBA_MIN_ITEMS", 0)  # the CPU side runs numba's keyed_dropout_rows
    ids = torch.randperm(10**6, generator=g)[:5000] * 5000
    for w in (1, 37, 128):
        xs = torch.randn(5000, w, generator=g)
        cpu = dropout.keyed_dropout(xs, ids, 0.4, 2**63 + 99)
        gpu = dropout.keyed_dropout(xs.to(dev), ids.to(dev), 0.4, 2**63 + 99)
        assert gpu.is_cuda and torch.equal(gpu.cpu().view(torch.int32), cpu.view(torch.int32))
