"""Fault table: each fault of issue 32 under mpiexec and under a launch without a launcher that owns the ranks.

    python scripts/fault_table.py                  # every case, both launches (a few minutes on 2 cores)
    python scripts/fault_table.py --only kill,stop --launch direct

Cases (4 ranks on Cora unless said):
- api-with-raise: a README-style script (`with gd.init() as ctx:` ... `gd.Trainer(...).fit()`) whose
  rank 1 raises ValueError in forward at epoch 3;
- api-plain-raise: the same without `with` (gd.init() only);
- api-with-exit3, api-plain-exit3: rank 0 calls sys.exit(3) in forward at epoch 3;
- truncated: `gnn-dist train` on a copy of the partition whose part-1/features.npy is truncated;
- kill: `gnn-dist train`, rank 2 killed with SIGKILL after 5 epochs;
- stop: `gnn-dist train --heartbeat-timeout 2`, rank 1 stopped (SIGSTOP) for 5 s after 5 epochs, then
  continued: the run must finish;
- pickle: `gnn-dist predict --model-file` (2 ranks) on a crafted .pt whose unpickling runs a command;
- hostile inputs and flags (scripts/fault_inputs.py): an edge list with an id of 2^31+5, an empty one,
  labels of 99 and -1, PyG-Temporal files whose fields disagree (one `gnn-dist partition` process each,
  launch "single"); `--model gat --staleness 1`; a resume under `--staleness 1` against the run straight
  through; the hidden dropout masks of an int8 run against fp32's (2 ranks on Cora).

Launches: `mpiexec -n P` (MPICH's hydra ends the other ranks itself once one exits non-zero, and
reports the first non-zero code), and `direct`: one process per rank with torchrun's variables, this
script their parent, so every rank's own exit code is seen and nothing but gnn-dist ends the others.

Columns: every rank's exit code (direct launch; -N: killed by signal N), mpiexec's code, seconds from
the fault (the first error line, the first rank's exit, or the signal) until every process (ranks and
their sentinels) is gone, whether anything aborted (`terminate called`, `Aborted`, a core, C++ log or
backtrace lines), and the lines printed, each once, "(xN)" before it where N processes printed it (hydra's
banner left out; for partition, its notes and errors only). A single process's peak resident memory (its
VmHWM, read every 20 ms until it exits) is in the last column's note.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil
from fault_inputs import input_cases, run_before, write_inputs

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
USER_SCRIPT = ROOT / "tests" / "fault_worker.py"  # the README-style script whose one rank fails
EVIL = """
import os
import torch


class Evil:
    def __reduce__(self):
        return (os.system, ("touch {marker}",))


torch.save({{"model": Evil(), "args": {{"model": "gcn"}}}}, "{path}")
"""
ABORT = re.compile(r"terminate called|Aborted|core dumped|Segmentation fault|Exception raised from|frame #\d|"
                   r"^\[rank\d+\]:\[[EWF]\d{4}|^\[[EWF]\d{4} |\.cpp:\d+\]", re.M)
BANNER = re.compile(r"^(=+|\s*$|.*BAD TERMINATION|.*PID \d+ RUNNING AT|.*EXIT CODE:|.*CLEANING UP|"
                    r".*YOU CAN IGNORE|YOUR APPLICATION TERMINATED|This typically refers|Please see the FAQ)")


@dataclass
class Case:
    name: str
    ranks: int
    argv: list[str]  # the rank's command after the interpreter
    expect: str  # what should happen, in words
    signal_rank: int | None = None  # kill or stop this rank once the log shows 5 epochs
    signal: str | None = None  # "kill" or "stop"
    log: Path | None = None
    marker: Path | None = None  # the pickle case: a file that exists only if the file's code ran
    launches: tuple = ("mpiexec", "direct")  # "single": one plain process (partition)
    limit_gb: float | None = None  # an address-space cap, so that a regression fails here, not the machine
    before: list = field(default_factory=list)  # commands run first under mpiexec (untimed)
    check: Callable[[], str] | None = None  # a note computed after the run
    keep: str | None = None  # show only lines matching this (default: all but hydra's banner)


@dataclass
class Outcome:
    codes: list = field(default_factory=list)
    rc: int | None = None
    seconds: float | None = None
    aborted: bool = False
    lines: list = field(default_factory=list)
    note: str = ""


def prepare(folder: Path) -> dict[str, Path]:
    """Partitions (Cora at 4 and 2 parts), a truncated copy, the user script, a trained model and a crafted one."""
    def gnn(*args: str) -> None:
        subprocess.run([sys.executable, "-m", "gnn_dist", *args], check=True, capture_output=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))

    for parts in (4, 2):
        gnn("partition", "--dataset", "cora", "--parts", str(parts), "--out", str(folder / f"cora-{parts}"))
    shutil.copytree(folder / "cora-4", folder / "truncated-4")
    features = folder / "truncated-4" / "part-1" / "features.npy"
    os.truncate(features, features.stat().st_size // 2)
    (folder / "evil_maker.py").write_text(EVIL.format(marker=folder / "PWNED", path=folder / "evil.pt"))
    subprocess.run([sys.executable, str(folder / "evil_maker.py")], check=True)
    return {"cora4": folder / "cora-4", "cora2": folder / "cora-2", "trunc": folder / "truncated-4",
            "user": USER_SCRIPT, "evil": folder / "evil.pt", "marker": folder / "PWNED", **write_inputs(folder)}


def cases(p: dict[str, Path], folder: Path) -> list[Case]:
    train = ["-m", "gnn_dist", "train", "--quiet", "--eval-every", "0"]
    out = []
    for style in ("with", "plain"):
        out.append(Case(f"api-{style}-raise", 4, [str(p["user"]), str(p["cora4"]), "1", "raise", style],
                        "rank 1 prints ValueError; every rank exits 1"))
    for style in ("with", "plain"):
        out.append(Case(f"api-{style}-exit3", 4, [str(p["user"]), str(p["cora4"]), "0", "exit3", style],
                        "rank 0 prints sys.exit(3); every rank exits 3"))
    out.append(Case("truncated", 4, train + ["--partition", str(p["trunc"]), "--epochs", "5"],
                    "rank 1 prints the checksum line; every rank exits 2"))
    out.append(Case("kill", 4, train + ["--partition", str(p["cora4"]), "--epochs", "100000",
                                        "--log", str(folder / "kill.jsonl")],
                    "survivors name rank 2 and exit 3 (mpiexec: hydra kills them, 9)", 2, "kill",
                    folder / "kill.jsonl"))
    out.append(Case("stop", 4, train + ["--partition", str(p["cora4"]), "--epochs", "300", "--heartbeat-timeout",
                                        "2", "--log", str(folder / "stop.jsonl")],
                    "rank 1 stopped 5 s, heartbeat timeout 2 s: the run finishes, every rank 0", 1, "stop",
                    folder / "stop.jsonl"))
    out.append(Case("pickle", 2, ["-m", "gnn_dist", "predict", "--partition", str(p["cora2"]), "--model-file",
                                  str(p["evil"]), "--out", str(folder / "pred.npy")],
                    "refused in one line, exit 2, the file's command never runs", marker=p["marker"]))
    return out + input_cases(_input_case, p, folder)


def _input_case(name: str, ranks: int, argv: list[str], expect: str, **kw) -> Case:
    keep = r"note:|warning:|error:" if kw.get("launches") == ("single",) else None
    return Case(name, ranks, argv, expect, keep=keep, **kw)


class Watch:
    """Timestamped output lines and every process seen under the launched ones (sentinels included)."""

    def __init__(self, procs: list[subprocess.Popen]):
        self.procs, self.lines, self.seen, self.peak_rss = procs, [], {}, 0
        self.t_first_exit: float | None = None
        self.threads = [threading.Thread(target=self._read, args=(p.stderr,), daemon=True) for p in procs]
        self.threads += [threading.Thread(target=self._read, args=(p.stdout,), daemon=True) for p in procs if p.stdout]
        for t in self.threads:
            t.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def poll(self) -> None:
        for p in self.procs:
            try:
                for c in [psutil.Process(p.pid)] + psutil.Process(p.pid).children(recursive=True):
                    self.seen.setdefault(c.pid, c)
                self.peak_rss = max(self.peak_rss, _high_water(p.pid))
            except psutil.Error:
                pass

    def alive(self) -> bool:
        return any(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE for proc in self._safe())

    def _safe(self):
        for proc in self.seen.values():
            try:
                proc.status()
                yield proc
            except psutil.Error:
                continue

    def ranks(self) -> dict[int, psutil.Process]:
        """Rank -> process, for the rank processes themselves (a sentinel's parent carries the same rank)."""
        out = {}
        for proc in self._safe():
            rank = _rank_of(proc)
            if rank is not None and _rank_of(proc.parent()) != rank:
                out[rank] = proc
        return out


def _high_water(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM, kept by the kernel), in bytes; 0 once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:")), 0)
    except OSError:
        return 0


def _rank_of(proc: psutil.Process | None) -> int | None:
    try:
        env = proc.environ()
        value = env.get("PMI_RANK", env.get("RANK"))
        return None if value is None else int(value)
    except (psutil.Error, AttributeError, ValueError):
        return None


def launch(case: Case, mode: str, cwd: Path) -> list[subprocess.Popen]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if mode == "single":
        cap = None if case.limit_gb is None else lambda: resource.setrlimit(
            resource.RLIMIT_AS, (int(case.limit_gb * 2**30),) * 2)
        return [subprocess.Popen([sys.executable, *case.argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, preexec_fn=cap)]
    if mode == "mpiexec":
        return [subprocess.Popen([str(BIN / "mpiexec"), "-n", str(case.ranks), sys.executable, *case.argv], cwd=cwd,
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [subprocess.Popen([sys.executable, *case.argv], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=dict(env, RANK=str(r), WORLD_SIZE=str(case.ranks), LOCAL_RANK=str(r),
                                                 LOCAL_WORLD_SIZE=str(case.ranks), MASTER_ADDR="127.0.0.1",
                                                 MASTER_PORT=str(port)))
            for r in range(case.ranks)]


def epochs_logged(log: Path | None) -> int:
    return len(log.read_text().splitlines()) if log is not None and log.exists() else 0


def run_case(case: Case, mode: str, cwd: Path, timeout: float) -> Outcome:
    if case.log is not None and case.log.exists():
        case.log.unlink()
    if case.marker is not None and case.marker.exists():
        case.marker.unlink()
    failed = run_before(case.before, case.ranks, BIN / "mpiexec", dict(os.environ, PYTHONPATH=str(ROOT)), cwd)
    if failed:
        return Outcome(note=failed)
    procs = launch(case, mode, cwd)
    watch, t_fault, start = Watch(procs), None, time.monotonic()
    while time.monotonic() - start < timeout:
        watch.poll()
        if t_fault is None and case.signal and epochs_logged(case.log) >= 5:
            t_fault = inject(case, watch)
        if watch.t_first_exit is None and any(p.poll() is not None for p in procs):
            watch.t_first_exit = time.monotonic()
        if all(p.poll() is not None for p in procs) and not watch.alive():
            break
        time.sleep(0.02)
    t_end = time.monotonic()
    for p in procs:
        if p.poll() is None:
            p.kill()
    for t in watch.threads:
        t.join(timeout=5)
    return outcome(case, mode, procs, watch, t_fault, t_end, timed_out=t_end - start >= timeout)


def inject(case: Case, watch: Watch) -> float | None:
    target = watch.ranks().get(case.signal_rank)
    if target is None:
        return None
    if case.signal == "kill":
        target.send_signal(signal.SIGKILL)
        return time.monotonic()
    target.send_signal(signal.SIGSTOP)
    t = time.monotonic()
    time.sleep(5.0)
    try:
        target.send_signal(signal.SIGCONT)
    except psutil.Error:  # given up for lost and ended meanwhile
        pass
    return t


def outcome(case: Case, mode: str, procs, watch: Watch, t_fault, t_end, timed_out: bool) -> Outcome:
    text = "\n".join(line for _, line in watch.lines)
    errors = [t for t, line in watch.lines if "error:" in line]
    marks = [t for t in (t_fault, errors[0] if errors else None, watch.t_first_exit) if t is not None]
    o = Outcome(rc=procs[0].returncode if mode == "mpiexec" else None,
                codes=[p.returncode for p in procs] if mode != "mpiexec" else [],
                seconds=None if case.signal == "stop" or not marks else t_end - min(marks),
                aborted=bool(ABORT.search(text)) or any(p.returncode in (134, -6, 139, -11) for p in procs))
    shown = collections.Counter(line for _, line in watch.lines if not BANNER.match(line) and "wrote " not in line
                                and "final epoch" not in line and (case.keep is None or re.search(case.keep, line)))
    o.lines = [f"(x{n}) {line}" if n > 1 else line for line, n in sorted(shown.items())]  # same line, several ranks
    if case.marker is not None:
        o.note = "the file's command RAN" if case.marker.exists() else "nothing ran"
    if case.signal:
        did = f"{'killed' if case.signal == 'kill' else 'stopped 5 s'}: rank {case.signal_rank}"
        o.note = did if t_fault is not None else "the signal was NOT sent (the run ended first)"
    if case.check is not None:
        o.note = case.check()
    if mode == "single":
        o.note = (o.note + "; " if o.note else "") + f"peak RSS {watch.peak_rss / 2**20:.0f} MB"
    if timed_out:
        o.note = (o.note + "; " if o.note else "") + "TIMED OUT"
    return o


def cell(lines: list[str], width: int = 160) -> str:
    joined = " / ".join(lines) if lines else "(none)"
    joined = joined if len(joined) <= width else joined[:width] + " ..."
    return joined.replace("|", "\\|")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=None, help="comma-separated case names (or prefixes)")
    ap.add_argument("--launch", default="both", choices=["both", "mpiexec", "direct"])
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds one launch may take")
    a = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="gnn-dist-faults-"))
    paths = prepare(folder)
    chosen = [c for c in cases(paths, folder)
              if a.only is None or any(c.name.startswith(o) for o in a.only.split(","))]
    modes = ["mpiexec", "direct", "single"] if a.launch == "both" else [a.launch, "single"]
    print("| case | expected | launch | exit code of each rank | mpiexec's code | s until all gone | aborted | "
          "lines printed |")
    print("|---|---|---|---|---|---|---|---|")
    for case in chosen:
        for mode in (m for m in modes if m in case.launches):
            o = run_case(case, mode, folder, a.timeout)
            codes = " ".join(map(str, o.codes)) if o.codes else "(hydra's)"
            secs = "-" if o.seconds is None else f"{o.seconds:.2f}"
            rc = "-" if o.rc is None else str(o.rc)
            note = f" [{o.note}]" if o.note else ""
            print(f"| {case.name} | {case.expect} | {mode} | {codes} | {rc} | {secs} | {'yes' if o.aborted else 'no'} | "
                  f"{cell(o.lines)}{note} |", flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
