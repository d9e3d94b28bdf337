"""CPU halo all-to-alls over MPI under mpiexec: the same bytes as gloo, agreed plans, the same training."""
from __future__ import annotations

import json
import os

import pytest

from tests.conftest import cli_partition, run_mpi, run_worker

pytestmark = pytest.mark.slow  # multi-rank launches


def test_mpi_and_gloo_deliver_the_same_bytes_and_plans_agree_on_one(tmp_path):
    """Any dtype, shape and split arrives byte for byte; small plans take MPI, one rank's large plan takes
    every rank's to gloo."""
    run_worker(3, "transport_worker.py", str(tmp_path))
    for r in range(3):
        assert (tmp_path / f"rank{r}.txt").read_text() == "ok", (r, (tmp_path / f"rank{r}.txt").read_text())


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="2 ranks on 1 core: the launcher keeps MPI out")
def test_training_over_mpi_equals_training_over_gloo(tmp_path):
    """The log counts, per channel, the all-to-alls that went over MPI: some under auto, none under gloo."""
    part = cli_partition(tmp_path, "karate", 2)
    losses, mpi_calls = {}, {}
    for transport in ("auto", "gloo"):
        log = tmp_path / f"{transport}.jsonl"
        run_mpi(2, "train", "--partition", part, "--epochs", "5", "--quiet", "--transport", transport, "--log", log)
        records = [json.loads(line) for line in log.read_text().splitlines()]
        losses[transport] = [r["loss"] for r in records]
        mpi_calls[transport] = [sum(c["mpi_calls"] for c in r["halo"].values()) for r in records]
    assert all(n > 0 for n in mpi_calls["auto"]) and not any(mpi_calls["gloo"]), mpi_calls
    assert losses["auto"] == losses["gloo"]  # bytes are bytes: bit-identical runs
