"""`gnn-dist partition` and `info`: the happy path, and one clear line with exit 2 for each bad input."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.conftest import run_cli, write_npz_graph


def _leftovers(folder):
    return [p.name for p in folder.iterdir() if ".partial-" in p.name or ".old-" in p.name or p.name.endswith(".tmp")]


@pytest.fixture(scope="module")
def cora_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "cora-4"
    r = run_cli("partition", "--dataset", "cora", "--parts", "4", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "edge cut" in r.stdout and "replication" in r.stdout
    return out


@pytest.mark.slow  # seconds of subprocess start-up: the full suite runs it, the fast subset has others of its kind
def test_info_prints_the_same_table(cora_dir):
    r = run_cli("info", str(cora_dir))
    assert r.returncode == 0, r.stderr
    assert "checksums ok" in r.stdout
    table = json.loads((cora_dir / "partition.json").read_text())["stats"]
    assert table["undirected"] and f"edge cut {table['edge_cut'] // 2} undirected edges" in r.stdout  # Cora: both ways


def test_help_on_every_subcommand():
    for cmd in ("partition", "info", "train"):
        r = run_cli(cmd, "--help")
        assert r.returncode == 0 and "usage" in r.stdout


def _assert_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("[gnn-dist]")]
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize("spec,needle", [
    ("bogus", "unknown data set 'bogus'"),
    ("sbm:nodes", "malformed data set spec"),
    ("sbm:nodes=ten", "'nodes' must be int"),
    ("sbm:colour=3", "unknown parameter 'colour'"),
])
def test_bad_dataset(spec, needle, tmp_path):
    r = run_cli("partition", "--dataset", spec, "--parts", "2", "--out", str(tmp_path / "o"))
    _assert_error(r, needle)
    assert not (tmp_path / "o").exists() and not _leftovers(tmp_path)


@pytest.mark.parametrize("parts,needle", [("0", "--parts must be at least 1"),
                                          pytest.param("35", "between 1 and the number of nodes (34)", marks=pytest.mark.slow)])
def test_bad_parts(parts, needle, tmp_path):
    r = run_cli("partition", "--dataset", "karate", "--parts", parts, "--out", str(tmp_path / "o"))
    _assert_error(r, needle)
    assert not (tmp_path / "o").exists()


def _file_graph(tmp_path, src, dst, x=None):
    n = 5
    x = np.ones((n, 3), np.float32) if x is None else x
    return write_npz_graph(tmp_path / "g.npz", src, dst, x, np.arange(n) % 2)


@pytest.mark.parametrize("src,dst,needle", [
    ([0, 1, 7], [1, 2, 3], "edge source id 7 is out of range for 5 nodes"),
    ([0, 1, 2], [1, -4, 3], "edge target id -4 is negative"),
])
def test_bad_edge_ids(src, dst, needle, tmp_path):
    f = _file_graph(tmp_path, src, dst)
    r = run_cli("partition", "--dataset", f"file:{f}", "--parts", "2", "--out", str(tmp_path / "o"))
    _assert_error(r, needle)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_features(bad, tmp_path):
    x = np.ones((5, 3), np.float32)
    x[3, 1] = bad
    f = _file_graph(tmp_path, [0, 1, 2], [1, 2, 3], x)
    r = run_cli("partition", "--dataset", f"file:{f}", "--parts", "2", "--out", str(tmp_path / "o"))
    _assert_error(r, "NaN or inf", "node 3")


@pytest.mark.slow
def test_existing_out_needs_force(cora_dir, tmp_path):
    before = {p: p.stat().st_mtime_ns for p in cora_dir.rglob("*")}
    r = run_cli("partition", "--dataset", "karate", "--parts", "2", "--out", str(cora_dir))
    _assert_error(r, "exists and is not empty", "--force")
    assert before == {p: p.stat().st_mtime_ns for p in cora_dir.rglob("*")}
    out = tmp_path / "k"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    r = run_cli("partition", "--dataset", "karate", "--parts", "2", "--out", str(out), "--force")
    assert r.returncode == 0, r.stderr
    assert not (out / "keep.txt").exists() and (out / "partition.json").exists()
    assert not _leftovers(tmp_path)


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_truncated_file_fails_checksum(cora_dir, tmp_path):
    d = _copy(cora_dir, tmp_path / "c")
    f = d / "part-1" / "features.npy"
    data = f.read_bytes()
    os.chmod(f, 0o644)
    f.write_bytes(data[: len(data) // 2])
    _assert_error(run_cli("info", str(d)), "part-1/features.npy fails its checksum")


def test_edited_file_fails_checksum(cora_dir, tmp_path):
    d = _copy(cora_dir, tmp_path / "c")
    f = d / "part-0" / "halo.npz"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    _assert_error(run_cli("info", str(d)), "part-0/halo.npz fails its checksum")


def test_unknown_format_version(cora_dir, tmp_path):
    d = _copy(cora_dir, tmp_path / "c")
    meta = json.loads((d / "partition.json").read_text())
    meta["format_version"] = 99
    (d / "partition.json").write_text(json.dumps(meta))
    _assert_error(run_cli("info", str(d)), "unknown format version 99")


def test_missing_directory(tmp_path):
    _assert_error(run_cli("info", str(tmp_path / "nope")), "does not exist")


@pytest.mark.slow
def test_shipped_data_found_outside_the_source_tree(tmp_path):
    """Run from an unrelated folder so only the installed locations can supply Cora."""
    r = run_cli("partition", "--dataset", "cora", "--parts", "2", "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_info_summarises_a_training_log(tmp_path):
    log = tmp_path / "run.jsonl"
    rec = {"epoch": 0, "loss": 1.5, "epoch_time": 0.5, "test_acc": 0.25,
           "halo": {"fwd.L0": {"bytes": [0, 2000, 4000], "wait_s": 0.002, "staleness": 1, "qvar": 0.5,
                               "bits": [0, 8, 4]}}}
    log.write_text("\n".join(json.dumps(dict(rec, epoch=e)) for e in range(2)) + "\n")
    r = run_cli("info", "--run", str(log))
    assert r.returncode == 0, r.stderr
    assert "2 epochs" in r.stdout and "test_acc 0.2500" in r.stdout
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith("fwd.L0"))
    assert "0.0/2.0/4.0" in row and "0/8/4" in row and "2.00" in row
    _assert_error(run_cli("info", "--run", str(tmp_path / "nope.jsonl")), "does not exist")
