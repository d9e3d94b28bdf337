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


def _world(monkeypatch, rank, size, heard, covered=()):
    """A failing rank of `size` that heard `heard` ({rank: message}) and, if quiet, was told `covered`."""
    monkeypatch.setattr(alike, "mpi_world", lambda: (rank, size))
    monkeypatch.setattr(alike, "_comm", lambda start_mpi: object())
    monkeypatch.setattr(alike, "_exchange", lambda comm, message, r, s: heard)
    monkeypatch.setattr(alike, "_covered", lambda comm: list(covered))
    sent = []
    monkeypatch.setattr(alike, "_send", lambda comm, data, peers, tag: sent.append((data, peers, tag)))
    monkeypatch.setattr(alike, "wait_until_read", lambda fds: None)
    return sent


def test_the_lowest_rank_prints_each_message_once_with_its_ranks_and_says_whom_it_covered(monkeypatch):
    sent = _world(monkeypatch, 0, 4, {0: "no such file", 1: "no such file", 2: "bad row 7", 3: "no such file"})
    out = io.StringIO()
    alike.report("no such file", lambda who, text: f"{who}gnn-dist train: error: {text}", out)
    assert out.getvalue() == ("[ranks 0,1,3] gnn-dist train: error: no such file\n"
                              "[rank 2] gnn-dist train: error: bad row 7\n")
    assert sent == [(b"[0, 1, 2, 3]", [1, 2, 3], alike.COVER_TAG)]  # every peer learns who is covered


def test_a_higher_rank_is_quiet_only_when_the_lowest_covered_it(monkeypatch):
    render = lambda who, text: f"{who}gnn-dist: error: {text}"  # noqa: E731
    _world(monkeypatch, 2, 4, {0: "x", 2: "x"}, covered=[0, 2])
    out = io.StringIO()
    alike.report("x", render, out)
    assert out.getvalue() == ""
    _world(monkeypatch, 2, 4, {0: "x", 2: "y"}, covered=[0])  # it failed after rank 0 had listened
    alike.report("y", render, out)
    assert out.getvalue() == "[rank 2] gnn-dist: error: y\n"


def test_torchrun_variables_win_over_an_mpi_launchers(monkeypatch):
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "4")
    assert alike.mpi_world() == (0, 4)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert alike.mpi_world() is None
