"""Run under mpiexec by tests/test_model_matrix.py: one model trained under many exchange settings in one launch.

Usage: mpiexec -n P python tests/matrix_worker.py OUT JOBS_JSON
JOBS_JSON: a list of {"name", "partition", "model": [flags naming the model], "settings": [names in SETTINGS]}.
Each setting goes through the `gnn-dist train` path in-process: the CLI's own parser and checks (a refusal is
recorded with its message), a fresh graph, exchange and model, then 2 epochs. Rank 0 writes OUT/<name>.json:
{setting: {"losses", "final", "mpi_all_to_alls", "halo_bytes"} or {"refused": message}}.
"""
from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

# every exchange setting of `gnn-dist train`, by name: the flags that select it
SETTINGS = {
    "fp32": [], "fp16": ["--codec", "fp16"], "bf16": ["--codec", "bf16"], "int8": ["--codec", "int8"],
    "int4": ["--codec", "int4"], "int2": ["--codec", "int2"], "adaptive": ["--codec", "adaptive"],
    # stale forward rows (gradients waited for: the default); plain PipeGCN (stale gradients too, unsmoothed);
    # the drift-corrected form with smoothed stale gradients and the change test
    "stale": ["--staleness", "1"], "stale-plain": ["--staleness", "1", "--stale-momentum", "0", "--stale-grads", "plain"],
    "stale-correct": ["--staleness", "1", "--stale-form", "correct", "--stale-grads", "same", "--stale-bound", "10"],
    "skip": ["--skip-threshold", "1"], "no-input-cache": ["--no-input-cache"], "no-overlap": ["--no-overlap"],
    "transport-gloo": ["--transport", "gloo"],
}
EXACT = ("fp32", "no-input-cache", "no-overlap", "transport-gloo")  # must equal one process
# 3 epochs: a stale block is first smoothed at step 3; no dropout: hidden-layer masks are drawn per rank
COMMON = ["--epochs", "3", "--dropout", "0", "--quiet"]


@contextlib.contextmanager
def transport_of(name: str, ctx):
    """What `init(transport=name)` sets up: with "gloo", the halo group is not carried over MPI."""
    from gnn_dist.runtime import transport

    comm = transport._COMMS.pop(ctx.halo_group, None) if name == "gloo" else None
    try:
        yield
    finally:
        if comm is not None:
            transport._COMMS[ctx.halo_group] = comm


def count_mpi_all_to_alls() -> list:
    """Count the all-to-alls that really travel over MPI (one element per call)."""
    from gnn_dist.runtime import transport

    calls, real = [], transport._ialltoallv

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    transport._ialltoallv = counted
    return calls


def train_once(ctx, argv: list[str], mpi_calls: list) -> dict:
    """The body of `gnn-dist train` (cli.train.run) after init, for one command line."""
    import torch

    from gnn_dist.cli import train as cli
    from gnn_dist.cli.main import build_parser
    from partition.errors import UsageError
    from partition.store import read_meta

    args = build_parser().parse_args(["train", *argv])
    try:
        cli.check_args(args)
        meta = read_meta(args.partition)
        kind = cli.check_partition_kind(args, meta)
    except UsageError as e:
        return {"refused": str(e)}
    setup = {"dynamic": cli.dynamic_setup, "static": cli.static_setup, "typed": cli.static_setup}[kind]
    before = len(mpi_calls)
    with transport_of(args.transport, ctx):
        torch.manual_seed(args.seed)
        _, make_trainer, _ = setup(args, ctx, meta)
        trainer = make_trainer()
        final = trainer.fit(args.epochs)
    numbers = {k: v for k, v in final.items() if isinstance(v, float) and k.startswith(("train_", "val_", "test_"))}
    return {"losses": [h["loss"] for h in trainer.history], "final": numbers, "mpi_all_to_alls": len(mpi_calls) - before,
            "halo_bytes": sum(h.get("halo_bytes_all_ranks", 0) for h in trainer.history)}


def main() -> None:
    from gnn_dist.runtime.launch import init

    out, jobs = Path(sys.argv[1]), json.loads(sys.argv[2])
    ctx = init()
    mpi_calls = count_mpi_all_to_alls()
    for job in jobs:
        runs = {s: train_once(ctx, ["--partition", job["partition"], *job["model"], *COMMON, *SETTINGS[s]], mpi_calls)
                for s in job["settings"]}
        if ctx.is_main:
            (out / f"{job['name']}.json").write_text(json.dumps(runs))
    ctx.close()


if __name__ == "__main__":
    main()
