"""GPU placement by physical GPU (issue 39): ranks share the staged path only where two hold one GPU's UUID.

All on CPU: the decision (`placement.choose`) reads plain (host, UUID) tables; `gpus.place` is driven with
a fake CUDA, a fake MPI and, for torchrun, a real store on loopback.
"""
from __future__ import annotations

import datetime
import socket
import sys
import types

import pytest
import torch

from gnn_dist.runtime import gpus, placement, staging
from gnn_dist.runtime.placement import Holder, choose
from gnn_dist.runtime.rendezvous import Rendezvous
from partition.errors import LaunchError


def table(*rows) -> list[Holder | None]:
    """Holders from (host, uuid[, exclusive]) rows; None stays None (a rank without a GPU)."""
    return [None if r is None else Holder(*r) for r in rows]


def decide(backend, holders, me, local_rank, local_size, gpus_seen=1, fraction=None):
    return choose(backend, local_rank, local_size, gpus_seen, bool, holders, me, fraction)


def one_line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert "\n" not in text, text
    return text


@pytest.fixture(autouse=True)
def _no_host_staging(monkeypatch):
    monkeypatch.delenv("GNN_DIST_STAGE_HOST", raising=False)


def test_bound_ranks_on_their_own_gpus_use_nccl():
    """4 ranks on one host, each bound to one GPU (it sees cuda:0): distinct UUIDs, NCCL, no memory cap."""
    t = table(*[("n0", f"GPU-{i}") for i in range(4)])
    for r in range(4):
        p = decide(None, t, r, r, 4, gpus_seen=1)
        assert (p.backend, str(p.device), p.staged, p.memory_fraction) == ("nccl", "cuda:0", False, None)
    assert "NCCL" in p.note


def test_two_ranks_on_one_uuid_share_it_staged_with_half_its_memory():
    t = table(("n0", "GPU-a"), ("n0", "GPU-a"))
    for r in range(2):
        p = decide(None, t, r, r, 2, gpus_seen=1)
        assert (p.backend, str(p.device), p.staged, p.memory_fraction) == ("gloo", "cuda:0", True, 0.5)
    p0 = decide(None, t, 0, 0, 2)
    assert "2 ranks share 1 GPU(s)" in p0.note and "0.5" in p0.note


def test_mixed_hosts_share_where_one_host_does():
    """Host a: a GPU per rank; host b: three ranks on one GPU. Every rank stages (one backend for all); only
    the ranks on the shared GPU are held to a share of it, 1/3 each."""
    t = table(("a", "GPU-a0"), ("a", "GPU-a1"), ("b", "GPU-b0"), ("b", "GPU-b0"), ("b", "GPU-b0"))
    got = [decide(None, t, r, lr, ls, gpus_seen=2 if r < 2 else 1)
           for r, lr, ls in ((0, 0, 2), (1, 1, 2), (2, 0, 3), (3, 1, 3), (4, 2, 3))]
    assert {p.backend for p in got} == {"gloo"} and all(p.staged for p in got)
    assert [str(p.device) for p in got] == ["cuda:0", "cuda:1", "cuda:0", "cuda:0", "cuda:0"]
    assert [p.memory_fraction for p in got] == [None, None] + [pytest.approx(1 / 3)] * 3
    assert "3 ranks share 1 GPU(s)" in got[0].note


def test_same_uuid_on_two_hosts_is_one_gpu():
    """UUIDs are unique across hosts: two containers on one node, holding one GPU, share it."""
    p = decide(None, table(("pod-a", "GPU-x"), ("pod-b", "GPU-x")), 0, 0, 1)
    assert (p.backend, p.staged, p.memory_fraction) == ("gloo", True, 0.5)


def test_a_rank_without_gpu_keeps_everyone_off_nccl():
    t = table(("a", "GPU-a0"), None)
    assert decide(None, t, 0, 0, 1).backend == "gloo"
    assert choose(None, 0, 1, 0, bool, t, 1).device == torch.device("cpu")


def test_nccl_refuses_a_shared_gpu_in_one_line():
    t = table(("n0", "GPU-a"), ("n0", "GPU-a"), ("n1", "GPU-b"))
    with pytest.raises(LaunchError) as e:
        decide("nccl", t, 2, 0, 1)
    assert "GPU GPU-a is held by 2 ranks: NCCL needs one GPU per rank" in one_line(e)
    assert decide("nccl", table(("n0", "GPU-a"), ("n0", "GPU-b")), 1, 1, 2).backend == "nccl"


def test_exclusive_process_gpu_shared_is_refused_on_every_rank():
    t = table(("n0", "GPU-e", True), ("n0", "GPU-e", True), None)
    for backend in (None, "staged"):
        for me, seen in ((0, 1), (2, 0)):  # a rank on it, and a rank without a GPU: neither waits for the other
            with pytest.raises(LaunchError) as e:
                choose(backend, 0, 2, seen, bool, t, me)
            assert one_line(e) == ("GPU GPU-e is in exclusive-process mode and 2 ranks would share it: set "
                                   "`nvidia-smi -c DEFAULT` on its host or launch one rank per GPU")
    assert decide(None, table(("n0", "GPU-e", True), ("n0", "GPU-f", True)), 0, 0, 2).backend == "nccl"
    assert choose("gloo", 0, 2, 0, bool, t, 0).device == torch.device("cpu")  # the CPU: the GPU is not touched


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5, float("nan")])
def test_bad_fraction_is_one_line(bad):
    with pytest.raises(LaunchError) as e:
        decide(None, table(("n0", "GPU-a")), 0, 0, 1, fraction=bad)
    assert one_line(e).startswith("--gpu-memory-fraction must be in (0, 1]")


def test_fraction_overrides_the_equal_share():
    shared = decide(None, table(("n0", "GPU-a"), ("n0", "GPU-a")), 0, 0, 2, fraction=0.3)
    assert shared.memory_fraction == 0.3 and "0.3 of its GPU's memory (--gpu-memory-fraction)" in shared.note
    own = decide(None, table(("n0", "GPU-a"), ("n0", "GPU-b")), 0, 0, 2, fraction=0.8)
    assert (own.backend, own.memory_fraction) == ("nccl", 0.8) and "--gpu-memory-fraction" in own.note
    assert decide(None, table(("n0", "GPU-a"), ("n0", "GPU-a")), 0, 0, 2, fraction=1.0).memory_fraction == 1.0


def test_init_train_and_predict_refuse_a_bad_fraction_before_any_rank_meets(capsys):
    from gnn_dist.cli.main import build_parser
    from gnn_dist.runtime.launch import init

    with pytest.raises(LaunchError, match=r"--gpu-memory-fraction must be in \(0, 1\]"):
        init(gpu_memory_fraction=2.0)  # raises before any rendezvous: no MPI needed
    for command in (["train"], ["predict", "--model-file", "m", "--out", "o"]):  # refused as parsed: one line
        for bad, why in (("0", "must be in (0, 1]"), ("nan", "must be in (0, 1]"), ("abc", "must be a number")):
            with pytest.raises(SystemExit) as e:
                build_parser().parse_args([*command, "--partition", "p", "--gpu-memory-fraction", bad])
            assert e.value.code == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"argument --gpu-memory-fraction: {why}" in err, err
    assert build_parser().parse_args(["predict", "--partition", "p", "--model-file", "m", "--out", "o",
                                      "--gpu-memory-fraction", "0.5"]).gpu_memory_fraction == 0.5


def test_apply_sets_the_memory_share(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(("device", str(d))))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d: calls.append(("fraction", f, str(d))))
    monkeypatch.setattr(staging, "enable", lambda d: calls.append(("staging", str(d))))
    placement.apply(placement.Placement("gloo", torch.device("cuda:1"), True, None, 0.25), rank=1)
    assert calls == [("device", "cuda:1"), ("fraction", 0.25, "cuda:1"), ("staging", "cuda:1")]
    calls.clear()
    placement.apply(placement.Placement("nccl", torch.device("cuda:0"), False, None), rank=1)
    assert calls == [("device", "cuda:0"), ("staging", "None")]


class FakeCuda:
    """What torch.cuda tells one rank: the UUIDs of the GPUs it sees, in its order."""

    def __init__(self, monkeypatch, uuids: list[str], with_uuid: bool = True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(uuids))
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(uuids))
        props = lambda i: types.SimpleNamespace(uuid=uuids[i]) if with_uuid else types.SimpleNamespace()  # noqa: E731
        monkeypatch.setattr(torch.cuda, "get_device_properties", props)
        monkeypatch.setattr(gpus, "exclusive_process", lambda uuid: uuid.endswith("x"))


def fake_mpi(monkeypatch, others: dict[int, Holder | None], size: int) -> None:
    """An MPI whose allgather puts this rank's holder among the other ranks' (`others`, by rank)."""
    def allgather(mine):
        return [others.get(r, mine) for r in range(size)]
    mpi = types.SimpleNamespace(COMM_WORLD=types.SimpleNamespace(allgather=allgather))
    monkeypatch.setitem(sys.modules, "mpi4py", types.SimpleNamespace(MPI=mpi))


def rv(rank: int, size: int, local_rank: int, local_size: int, port: int = 0) -> Rendezvous:
    return Rendezvous(rank, size, local_rank, local_size, "127.0.0.1", port)


def test_place_under_mpiexec_with_per_rank_binding(monkeypatch):
    """Each rank sees one GPU (cuda:0), a different one: the gathered UUIDs say NCCL (counting said staged)."""
    host = socket.gethostname()
    FakeCuda(monkeypatch, ["5ddae7a0-0000-0000-0000-000000000002"])
    others = {r: Holder(host, f"GPU-5ddae7a0-0000-0000-0000-00000000000{r}", False) for r in (0, 1, 3)}
    fake_mpi(monkeypatch, others, 4)
    p = gpus.place(None, rv(2, 4, 2, 4), torchrun=False, fraction=None, timeout_s=5)
    assert (p.backend, str(p.device), p.staged) == ("nccl", "cuda:0", False)
    others[3] = Holder(host, "GPU-5ddae7a0-0000-0000-0000-000000000002", False)  # rank 3 bound to rank 2's GPU
    p = gpus.place(None, rv(2, 4, 2, 4), torchrun=False, fraction=None, timeout_s=5)
    assert (p.backend, p.staged, p.memory_fraction) == ("gloo", True, 0.5)


def test_place_asks_nothing_of_cuda_for_gloo(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: pytest.fail("CUDA queried for --backend gloo"))
    fake_mpi(monkeypatch, {}, 2)
    p = gpus.place("gloo", rv(0, 2, 0, 2), torchrun=False, fraction=None, timeout_s=5)
    assert (p.backend, p.device) == ("gloo", torch.device("cpu"))


def test_place_under_torchrun_without_agent_store_derives_the_host(monkeypatch):
    """No store exists before the process group: every rank of a host sees the same GPUs, rank r on r mod n."""
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    FakeCuda(monkeypatch, ["u0", "u1"])
    p = gpus.place(None, rv(3, 4, 3, 4), torchrun=True, fraction=None, timeout_s=5)
    assert (p.backend, str(p.device), p.memory_fraction) == ("gloo", "cuda:1", 0.5)
    assert gpus.place(None, rv(1, 2, 1, 2), torchrun=True, fraction=None, timeout_s=5).backend == "nccl"


def test_place_under_torchrun_gathers_through_the_agent_store(monkeypatch):
    """torchrun's agent store (here a real TCPStore on loopback) carries every rank's holder."""
    import torch.distributed as dist

    server = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=10), wait_for_workers=False)
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "t")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    FakeCuda(monkeypatch, ["gpu-x"])  # this rank's GPU is in exclusive-process mode
    n = gpus._GATHERED[0] + 1
    server.set(f"gnn_dist/t-0/gpus/{n}/0", '["h0", "GPU-gpu-y", false]')
    p = gpus.place(None, rv(1, 2, 0, 1, server.port), torchrun=True, fraction=None, timeout_s=10)
    assert (p.backend, str(p.device), p.staged) == ("nccl", "cuda:0", False)
    server.set(f"gnn_dist/t-0/gpus/{n + 1}/0", f'["{socket.gethostname()}", "GPU-gpu-x", true]')
    with pytest.raises(LaunchError, match="GPU GPU-gpu-x is in exclusive-process mode and 2 ranks would share it"):
        gpus.place(None, rv(1, 2, 0, 1, server.port), torchrun=True, fraction=None, timeout_s=10)


def test_holder_names_a_gpu_without_uuid_by_host_and_visible_device(monkeypatch):
    FakeCuda(monkeypatch, ["a", "b"], with_uuid=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    host = socket.gethostname()
    assert gpus.holder(3, 2) == Holder(host, f"{host}/6", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpus.holder(2, 2) == Holder(host, f"{host}/cuda:0", None)
    assert gpus.holder(0, 0) is None


def test_uuid_names_and_no_nvml(monkeypatch):
    assert gpus.uuid_name("5ddae7a0-1") == "GPU-5ddae7a0-1" and gpus.uuid_name("MIG-3") == "MIG-3"

    def no_library(name):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(gpus.ctypes, "CDLL", no_library)
    assert gpus.exclusive_process("GPU-none") is None  # no driver library: nothing refused up front
