"""`train`, `predict` and `info` read every partition file through its checksum, and `predict` gives back
the input's own ids where the edge-list loader compacted sparse ones.

The partition is one part of a sparse-id edge list with held-out link pairs: it holds every kind of root
file (node_map.npy, link_edges.npz, original_ids.npy) besides the part's own.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.conftest import one_error_line, run_cli


@pytest.fixture(scope="module")
def sparse(tmp_path_factory):
    """(partition directory, model file, the input's ids) of a link model trained on sparse ids."""
    folder = tmp_path_factory.mktemp("sparse")
    rng = np.random.default_rng(1)
    n = 200
    src = rng.integers(0, n, 1200)
    dst = (src + rng.integers(1, 6, src.shape[0])) % n
    ids = np.sort(rng.choice(2**40, n, replace=False))
    np.savetxt(folder / "e.csv", np.stack([ids[src], ids[dst]], 1), fmt="%d", delimiter=",")
    out = folder / "p"
    r = run_cli("partition", "--dataset", f"edges:{folder / 'e.csv'}?reverse=true", "--parts", "1", "--link-split",
                "0.1,0.1", "--out", str(out))
    assert r.returncode == 0 and "relabelled" in r.stderr, r.stderr
    model = folder / "m.pt"
    r = run_cli("train", "--partition", str(out), "--task", "link", "--epochs", "2", "--quiet",
                "--save-model", str(model))
    assert r.returncode == 0, r.stderr
    return out, model, ids


def _corrupt(src, dst, name: str):
    shutil.copytree(src, dst)
    f = dst / name
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    return dst


@pytest.mark.slow  # seconds of subprocess start-up: the full suite runs it, the fast subset has others of its kind
def test_predict_writes_the_input_ids_beside_its_output(sparse, tmp_path):
    part, model, ids = sparse
    r = run_cli("predict", "--partition", str(part), "--model-file", str(model), "--output", "embeddings",
                "--out", str(tmp_path / "emb.npy"))
    assert r.returncode == 0, r.stderr
    emb, got = np.load(tmp_path / "emb.npy"), np.load(tmp_path / "emb.ids.npy")
    assert emb.shape[0] == got.shape[0] == ids.shape[0] and np.array_equal(got, ids)
    assert "each row's input id in" in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb.ids.npy", "emb.npy"]  # no temporary left


@pytest.mark.slow  # seconds of subprocess start-up: the full suite runs it, the fast subset has others of its kind
def test_train_checks_the_held_out_pairs(sparse, tmp_path):
    part, _, _ = sparse
    bad = _corrupt(part, tmp_path / "p", "link_edges.npz")
    r = run_cli("train", "--partition", str(bad), "--task", "link", "--epochs", "1", "--quiet")
    one_error_line(r, "link_edges.npz fails its checksum", strict=False)


def test_predict_and_info_check_the_input_ids(sparse, tmp_path):
    part, model, _ = sparse
    bad = _corrupt(part, tmp_path / "p", "original_ids.npy")
    r = run_cli("predict", "--partition", str(bad), "--model-file", str(model), "--output", "embeddings",
                "--out", str(tmp_path / "emb.npy"))
    one_error_line(r, "original_ids.npy fails its checksum", strict=False)
    assert not (tmp_path / "emb.npy").exists()
    one_error_line(run_cli("info", str(bad)), "original_ids.npy fails its checksum")


@pytest.mark.slow
def test_train_checks_every_file_it_reads(sparse, tmp_path):
    """Each file of the partition in turn, corrupted: training stops in one line naming it (all but the
    input's ids, which training never reads)."""
    part, _, _ = sparse
    names = set(json.loads((part / "partition.json").read_text())["sha256"]) - {"original_ids.npy"}
    assert len(names) == 8  # node_map.npy, link_edges.npz and the part's 6 files
    for k, name in enumerate(sorted(names)):
        bad = _corrupt(part, tmp_path / f"p{k}", name)
        r = run_cli("train", "--partition", str(bad), "--task", "link", "--epochs", "1", "--quiet")
        one_error_line(r, f"{name} fails its checksum", strict=False)
