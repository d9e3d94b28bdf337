"""How an error met by several ranks is named (the launches themselves: tests/test_rank_errors.py)."""
import io

from gnn_dist.runtime import alike


def test_who_names_the_ranks_that_met_an_error():
    assert alike.who([2], 4) == "[rank 2] "
    assert alike.who([3, 0, 1, 2], 4) == "[all 4 ranks] "
    assert alike.who([1, 2, 3], 4) == "[ranks 1-3] "
    assert alike.who([3, 1], 4) == "[ranks 1,3] "


def test_outside_an_mpi_launch_the_line_is_printed_at_once(monkeypatch):
    for var in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    out = io.StringIO()
    alike.report("no such file", lambda who, text: f"{who}gnn-dist: error: {text}", out)
    assert out.getvalue() == "gnn-dist: error: no such file\n"
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "1")  # one rank: nothing to share
    assert alike.mpi_world() is None
