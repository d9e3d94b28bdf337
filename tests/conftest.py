"""Shared fixtures: small graphs made once per session, and a CLI runner."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
THREADS_LINE = re.compile(r"\[gnn-dist\] \d+ threads? per rank \(")  # rank 0's start-up line (runtime/launch.py)


def said(text: str) -> list[str]:
    """A run's non-empty lines less rank 0's start-up line on threads: what a test of one-line errors and of
    progress lines compares."""
    return [ln for ln in text.splitlines() if ln.strip() and not THREADS_LINE.match(ln)]
# The fast subset (`-m "not slow"`) may launch mpiexec this many times; more, and the session fails, naming the
# tests that launched (mark multi-rank launches slow: CONTRIBUTING.md).
FAST_MPIEXEC_LIMIT = 5
_MPIEXEC_LAUNCHES: dict[str, int] = {}  # test (or fixture) id -> mpiexec processes it started


def pytest_configure(config) -> None:
    """Count every mpiexec this session starts, by the test that was running (fixtures included)."""
    real = subprocess.Popen.__init__

    def counting(self, args, *rest, **kwargs):
        first = args[0] if isinstance(args, (list, tuple)) else str(args).split()[0]
        if Path(str(first)).name == "mpiexec":
            test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
            _MPIEXEC_LAUNCHES[test] = _MPIEXEC_LAUNCHES.get(test, 0) + 1
        real(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = counting


def pytest_sessionfinish(session, exitstatus) -> None:
    markexpr = (session.config.option.markexpr or "").replace(" ", "")
    if markexpr == "notslow" and sum(_MPIEXEC_LAUNCHES.values()) > FAST_MPIEXEC_LIMIT:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    """mpiexec launches, by test; the fast subset's over its limit says so (and failed, pytest_sessionfinish)."""
    launches = sum(_MPIEXEC_LAUNCHES.values())
    if not launches:
        return
    markexpr = (terminalreporter.config.option.markexpr or "").replace(" ", "")
    over = markexpr == "notslow" and launches > FAST_MPIEXEC_LIMIT
    terminalreporter.write_line(f"mpiexec launches: {launches}" + (f", over the fast subset's {FAST_MPIEXEC_LIMIT}: "
                                                                   f"mark multi-rank tests slow" if over else ""),
                                red=over)
    for test, n in sorted(_MPIEXEC_LAUNCHES.items()):
        terminalreporter.write_line(f"  {n} {test}")


# GNN_DIST_REQUIRE_GPU=N (scripts/gpu_check.sh sets it; N >= 1 GPUs on the machine): a test skipped for want of
# a GPU, CUDA, NCCL or Triton fails instead, so a GPU check whose GPU tests all skipped cannot pass. Other skips
# (numba, dgl) stay skips, and so does one that "needs K GPUs" for K > N (a P=2 NCCL run on one GPU).
GPU_SKIP = re.compile(r"cuda|gpu|nccl|triton", re.IGNORECASE)
MORE_GPUS = re.compile(r"needs (\d+) GPUs")


def _required_gpu_missing(report) -> None:
    """Turn a skipped report whose reason names the GPU stack into a failure carrying that reason."""
    required = os.environ.get("GNN_DIST_REQUIRE_GPU", "")
    if not required.isdigit() or int(required) < 1 or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    more = MORE_GPUS.search(reason)
    if GPU_SKIP.search(reason) and not (more and int(more.group(1)) > int(required)):
        report.outcome = "failed"
        report.longrepr = f"GNN_DIST_REQUIRE_GPU={required}, but this skipped: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Skips in a test's setup (skipif marks, fixtures) and body."""
    outcome = yield
    _required_gpu_missing(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Skips of a whole module while it is collected (a module-level importorskip or skip)."""
    outcome = yield
    _required_gpu_missing(outcome.get_result())


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python -m gnn_dist ARGS` as a user would, capturing both streams."""
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "gnn_dist", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout, env=e)


@pytest.fixture(scope="session")
def cora():
    from gnn_dist.data import load_dataset

    return load_dataset("cora")


@pytest.fixture(scope="session")
def small_sbm():
    from gnn_dist.data import load_dataset

    return load_dataset("sbm:nodes=3000,classes=6,avg_degree=8,homophily=0.8,features=16,seed=3")


@pytest.fixture(autouse=True, scope="module")
def cpu_path(request):
    """Every test module but tests/test_gpu*.py means the CPU path: the processes its tests and its module
    fixtures launch see no GPU, so a visible one changes nothing for them (the launcher would otherwise
    pick NCCL or the host-staged GPU path). Module scope: set before the module's own fixtures launch.
    In-process code picks no device on its own; tests/test_gpu*.py choose their devices themselves."""
    if request.node.path.name in ("test_gpu.py", "test_gpu_ranks.py"):
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUDA_VISIBLE_DEVICES", "")
        yield


def run_worker(world: int, script: str, *args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """mpiexec -n WORLD python tests/SCRIPT ARGS with this checkout importable (and `env`); fails the test on a
    non-zero exit."""
    mpiexec = str(Path(sys.executable).with_name("mpiexec"))
    r = subprocess.run([mpiexec, "-n", str(world), sys.executable, str(ROOT / "tests" / script), *map(str, args)],
                       capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})))
    assert r.returncode == 0, r.stderr[-3000:]
    archive = os.environ.get("GNN_DIST_EXACT_ARCHIVE")  # scripts/exactness_digest.py compares two such archives
    if archive:
        import shutil

        shutil.copytree(args[0], Path(archive) / f"{Path(script).stem}-P{world}-{len(list(Path(archive).glob('*')))}")
    return r


def worker_on(folder: Path, dataset: str, world: int, script: str) -> tuple[Path, subprocess.CompletedProcess]:
    """Partition `dataset` into `world` parts (the CLI), then run tests/SCRIPT OUT PART at `world` ranks; (OUT, run)."""
    part = cli_partition(folder, dataset, world)
    out = folder / "out"
    out.mkdir()
    return out, run_worker(world, script, out, part)


def run_mpi(world: int, *args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """`mpiexec -n WORLD gnn-dist ARGS` from the checkout (with `env` added), which must succeed (its stderr
    tail on failure)."""
    mpiexec = str(Path(sys.executable).with_name("mpiexec"))
    r = subprocess.run([mpiexec, "-n", str(world), sys.executable, "-m", "gnn_dist", *map(str, args)],
                       capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=dict(os.environ, **(env or {})))
    assert r.returncode == 0, r.stderr[-2000:]
    return r


def write_npz_graph(path: Path, src, dst, x, y, **extra) -> Path:
    np.savez(path, src=np.asarray(src), dst=np.asarray(dst), x=np.asarray(x), y=np.asarray(y), **extra)
    return path


def cli_partition(folder: Path, dataset: str, parts: int) -> Path:
    """Partition through the CLI, as a user would, into folder/<dataset>-<parts>."""
    out = folder / f"{dataset}-{parts}"
    r = run_cli("partition", "--dataset", dataset, "--parts", str(parts), "--out", str(out))
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to reach another host fails the test: loaders must read local files only."""
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError(f"a loader tried to reach the network: {args[1:] or kwargs}")

    for name in ("connect", "connect_ex", "sendto"):
        monkeypatch.setattr(socket.socket, name, refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def one_error_line(r: subprocess.CompletedProcess, needle: str, strict: bool = True) -> None:
    """Exit code 2 and one line naming the problem: the whole of stderr (strict), or its one `error:` line."""
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and (strict or "error:" in ln)]
    assert len(lines) == 1 and needle in lines[0], r.stderr


@pytest.fixture(scope="module")
def group():
    """A one-rank gloo world (rank 0 sends its halo rows to itself), for exchanges tested in this process."""
    import socket

    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield None
    dist.destroy_process_group()
