"""The CUDA path in one process: codecs on the device, compiled Triton kernels against the CPU's bits, the
exchange on a side stream (NCCL, and staged through host memory). tests/test_gpu_ranks.py launches ranks.

The GPU tests skip where torch sees no GPU (CI is CPU-only); run on a GPU machine with
`GNN_DIST_REQUIRE_GPU=1 python -m pytest tests/test_gpu.py tests/test_gpu_ranks.py`, where such a skip fails
instead (tests/conftest.py). The CPU test here proves that switch.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))


@needs_cuda
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


def exchange_round_trip(device: str, name: str, n: int = 4000) -> None:
    """Rank 0 sends rows to itself while the default stream keeps computing (on CUDA the exchange runs on its
    side stream); what arrives is the rows sent (int8: within one step), and gradients land at send_idx."""
    from gnn_dist.runtime.exchange import ExchangeConfig, HaloExchange, HaloPlan, Wire
    from gnn_dist.runtime.halo_fetch import HaloWait

    dev = torch.device(device)
    send_idx = torch.arange(0, n, 2, device=dev)
    ex = HaloExchange(HaloPlan(send_idx, [send_idx.numel()], [send_idx.numel()]), Wire(device=send_idx.device),
                      ExchangeConfig(codec=name))
    x = torch.randn(n, 64, device=dev, requires_grad=True)
    x2 = x.detach() * 2  # queued on the default stream just before the exchange reads x
    channel = ex.channel("layer", training=True)
    pending = ex.start(x, channel)
    busy = x2 @ torch.randn(64, 64, device=dev)  # default-stream work while the side stream sends
    halo = HaloWait.apply(x, pending, ex, channel)
    want = x.detach()[send_idx]
    if name == "fp32":
        assert torch.equal(halo, want)
    else:
        step = (want.amax(1) - want.amin(1)) / 255
        assert bool(((halo - want).abs() <= step.unsqueeze(1) * (1 + 1e-5) + 1e-7).all())
    halo.sum().backward()  # gradients go home the same way and land at send_idx
    expect = torch.zeros(n, device=dev)
    expect[send_idx] = 1.0
    assert torch.allclose(x.grad[:, 0], expect) and bool(busy.isfinite().all())
    assert ex.epoch_metrics()["fwd.L0"]["calls"] == 1


@needs_cuda
@pytest.mark.parametrize("name", ["fp32", "int8"])
def test_side_stream_exchange_round_trip(nccl_world_of_one, name):
    exchange_round_trip("cuda", name)


@pytest.fixture()
def gloo_world_of_one(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def staged_round_trip(device: str, name: str) -> None:
    """The round trip with host staging on `device` (cuda: from the exchange's side stream): rows to (pinned)
    host memory, gloo, and back, forward and backward."""
    from gnn_dist.runtime import staging

    staging.enable(torch.device(device))
    try:
        calls = staging.COUNTS["calls"]
        exchange_round_trip(device, name, n=200_000)
        assert staging.COUNTS["calls"] >= calls + 2  # forward and backward went through host memory
    finally:
        staging.enable(None)


@needs_cuda
@pytest.mark.parametrize("name", ["fp32", "int8"])
def test_staged_side_stream_exchange_round_trip(gloo_world_of_one, name):
    staged_round_trip("cuda", name)


@pytest.fixture(scope="module")
def triton_kernels():
    """The compiled kernels, and an interpreted copy of them (TRITON_INTERPRET while it loads); a triton the
    codec would not use (too old) fails here, where the comparisons would otherwise measure torch's path."""
    pytest.importorskip("triton")
    from gnn_dist.runtime import kernels, triton_kernels

    if not kernels.available():
        pytest.skip("numba (the CPU reference) not installed")
    assert kernels.triton_available(), f"triton older than {kernels.TRITON_MIN}: CUDA tensors take torch's path"
    return triton_kernels, triton_kernels.interpreted()


@needs_cuda
@pytest.mark.parametrize("bits", [8, 4, 2])
@pytest.mark.parametrize("n,w", [(300, 7), (9400, 7), (1800, 37), (520, 128), (20000, 128), (3, 5000)])
def test_compiled_codec_kernels_write_the_cpus_bits(triton_kernels, bits, n, w):
    """Compiled on the device (no FMA, rounded divisions) = numba on the CPU: whole wire records, decode, decode-add."""
    from gnn_dist.runtime import codec

    compiled, interpreted = triton_kernels
    before = compiled.LAUNCHES.copy()
    g = torch.Generator().manual_seed(n + w + bits)
    x = torch.randn(n, w, generator=g) * torch.logspace(-4, 3, n).unsqueeze(1)
    x[1], x[2, 0] = 2.5, float("nan")
    idx = torch.randint(0, n, (n * 3 // 4 + 1,), generator=g)
    name, dev = f"int{bits}", torch.device("cuda")
    for index in (idx, None):
        want, want_scale = codec.encode_rows(x, name, 7, index=index)  # numba
        got, scale = codec.encode_rows(x.to(dev), name, 7,
                                       index=None if index is None else index.to(dev))  # Triton, compiled
        assert torch.equal(got.cpu(), want) and torch.equal(scale.cpu().view(torch.int32), want_scale.view(torch.int32))
    if n * w <= 20000:  # the interpreter too, on small blocks (it is slow)
        mine = torch.empty_like(want)
        interpreted.encode_rows(x, None, bits, 7, mine)
        assert torch.equal(mine, want)
    dec = codec.decode_rows(got, name, w)
    assert dec.is_cuda and _same_bits(dec.cpu(), codec.decode_rows(want, name, w))
    target, dest = torch.randn(n + 5, w, generator=g), torch.randperm(n + 5, generator=g)[:n]
    expect = codec.decode_rows_add(want, name, w, target.clone(), dest)
    assert _same_bits(codec.decode_rows_add(got, name, w, target.to(dev), dest.to(dev)).cpu(), expect)
    v = compiled._variant  # the CUDA side ran the Triton kernels (LAUNCHES - before: those launched), each compared
    ran = {v("encode", BITS=bits, HAS_IDX=i) for i in (True, False)}
    assert set(compiled.LAUNCHES - before) >= ran | {v("decode", BITS=bits, HAS_IDX=i, ADD=i) for i in (True, False)}


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit, NaN's payload aside: the GPU's arithmetic makes its canonical NaN where x86 keeps the operand's."""
    nan = a.isnan()
    return torch.equal(nan, b.isnan()) and torch.equal(a[~nan].view(torch.int32), b[~nan].view(torch.int32))


@needs_cuda
def test_compiled_send_buffer_and_keyed_dropout_match_the_cpu(triton_kernels, monkeypatch):
    """The exchange's encode_split on the device writes the CPU's send buffer; keyed input dropout draws its masks."""
    from gnn_dist.nn import dropout
    from gnn_dist.runtime import codec, tuning

    compiled = triton_kernels[0]
    before = compiled.LAUNCHES.copy()
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5000, 64, generator=g)
    splits, names = [900, 0, 1200, 600, 2000], ["int8", "int4", "fp16", "int2", "int4"]
    index = torch.randint(0, 5000, (sum(splits),), generator=g)
    nbytes = sum(codec.wire_bytes(r, 64, c) for r, c in zip(splits, names))
    want, got = torch.empty(nbytes, dtype=torch.uint8), torch.empty(nbytes, dtype=torch.uint8, device=dev)
    codec.encode_split(x, index, splits, names, want, 1)
    codec.encode_split(x.to(dev), index.to(dev), splits, names, got, 1)
    assert torch.equal(got.cpu(), want)
    assert {key[0] for key in compiled.LAUNCHES - before} == {"encode"}  # Triton wrote the GPU's buffer
    monkeypatch.setattr(tuning, "NUMBA_MIN_ELEMENTS", 0)  # the CPU side runs numba's keyed_dropout_rows
    ids = torch.randperm(10**6, generator=g)[:5000] * 5000
    for w in (1, 37, 128):
        xs = torch.randn(5000, w, generator=g)
        drawn = compiled.LAUNCHES[compiled._variant("keyed_dropout")]
        cpu = dropout.keyed_dropout(xs, ids, 0.4, 2**63 + 99)
        gpu = dropout.keyed_dropout(xs.to(dev), ids.to(dev), 0.4, 2**63 + 99)
        assert gpu.is_cuda and torch.equal(gpu.cpu().view(torch.int32), cpu.view(torch.int32))
        assert compiled.LAUNCHES[compiled._variant("keyed_dropout")] == drawn + 1  # Triton's mask, not torch's


def test_require_gpu_turns_gpu_skips_into_failures(tmp_path):
    """GNN_DIST_REQUIRE_GPU=1 (tests/conftest.py): skips for CUDA, NCCL or Triton fail with their reason; other
    skips, and a test that needs more GPUs than required, stay skips; without it, all skip."""
    reasons = ["no CUDA device visible to torch", "numba (the reference) not installed", "NCCL needs 2 GPUs; 1 visible"]
    (tmp_path / "test_skips.py").write_text("import pytest\n" + "".join(
        f"\ndef test_{i}():\n    pytest.skip({r!r})\n" for i, r in enumerate(reasons))
        + "\n@pytest.mark.skipif(True, reason='triton not installed')\ndef test_mark():\n    pass\n")
    quiet, strict = (subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "tests.conftest", "-p",
                                     "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path / "test_skips.py")],
                                    capture_output=True, text=True, timeout=120, cwd=ROOT,
                                    env=dict(os.environ, PYTHONPATH=str(ROOT), GNN_DIST_REQUIRE_GPU=value))
                     for value in ("", "1"))
    assert quiet.returncode == 0 and "4 skipped" in quiet.stdout, quiet.stdout
    failed = [f"GNN_DIST_REQUIRE_GPU=1, but this skipped: Skipped: {r}" for r in (reasons[0], "triton not installed")]
    assert strict.returncode == 1 and "2 skipped" in strict.stdout and all(f in strict.stdout for f in failed), strict.stdout


@needs_cuda
def test_torch_dropout_on_cuda_draws_from_the_stream_and_leaves_the_default_generator_alone(monkeypatch):
    from tests.test_streams import torch_dropout_draws_from_the_stream

    torch_dropout_draws_from_the_stream("cuda", monkeypatch)
