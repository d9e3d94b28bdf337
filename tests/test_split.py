"""The split, read back: `gnn-dist info DIR --export-split FILE` and `LocalGraph.split()` in global ids."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gnn_dist.data import load_dataset
from gnn_dist.graph.local import LocalGraph
from partition.book import PartitionBook
from partition.store import LINK_FILE, read_meta, read_part, read_root_file
from tests.conftest import cli_partition, one_error_line, run_cli, run_worker

SBM = "sbm:nodes=600,classes=3,avg_degree=6,features=8,seed=5"
MASKS = ("train_mask", "val_mask", "test_mask")


@pytest.fixture(scope="module")
def sbm3(tmp_path_factory) -> Path:
    """The SBM (its split drawn by the loader) in 3 parts, with held-out link-prediction pairs."""
    out = tmp_path_factory.mktemp("split") / "sbm-3"
    r = run_cli("partition", "--dataset", SBM, "--parts", "3", "--out", str(out), "--link-split", "0.1,0.1")
    assert r.returncode == 0, r.stderr
    return out


def export(part: Path, f: Path) -> dict:
    r = run_cli("info", str(part), "--export-split", str(f))
    assert r.returncode == 0 and f"written to {f}" in r.stdout, r.stderr
    assert not f.with_name(f.name + ".tmp").exists()  # written through a temporary file, renamed
    with np.load(f, allow_pickle=False) as z:  # plain arrays: no pickle needed
        return {k: z[k] for k in z.files}


def parts(path: Path, typed: bool = False) -> list[LocalGraph]:
    """Every part as `gd.load_partition` (typed: `load_typed_partition`) builds it, less the exchange."""
    from gnn_dist.graph.typed import attach_types
    from partition.store import read_typed_features

    meta, book = read_meta(path), PartitionBook(path)
    out = []
    for k in range(meta["num_parts"]):
        plan = read_part(path, k, meta)
        g = LocalGraph.from_plan(plan, meta["num_classes"], meta["num_parts"], None)
        g.book = book
        out.append(attach_types(g, plan, meta, read_typed_features(path, k, meta)) if typed else g)
    return out


def assert_shares_make_the_split(shares: list[dict], z: dict) -> None:
    for key, mask in zip(("train", "val", "test"), MASKS):
        ids = np.concatenate([s[key] for s in shares])
        assert np.array_equal(np.sort(ids), np.flatnonzero(z[mask])), key
        assert all(np.all(np.diff(s[key]) > 0) for s in shares)  # sorted, no repeats within a part


def test_exported_split_is_the_drawn_split(sbm3, tmp_path):
    z = export(sbm3, tmp_path / "split.npz")
    g = load_dataset(SBM)  # the loader draws the split, seeded, as it did for the partitioner
    for key in MASKS:
        assert z[key].dtype == bool and np.array_equal(z[key], getattr(g, key)), key
    assert z["train_mask"].sum() > 0 and not (z["train_mask"] & z["test_mask"]).any()
    held = read_root_file(sbm3, LINK_FILE, read_meta(sbm3))
    assert sorted(z) == sorted([*MASKS, *(f"link_{k}" for k in held)])
    assert all(np.array_equal(z[f"link_{k}"], v) for k, v in held.items())
    assert_shares_make_the_split([p.split() for p in parts(sbm3)], z)


@pytest.mark.slow  # multi-rank: the fast subset keeps a handful of launches (tests/conftest.py)
def test_each_rank_reads_its_share(sbm3, tmp_path):
    run_worker(3, "split_worker.py", sbm3, tmp_path)
    shares = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(3)]
    assert_shares_make_the_split(shares, export(sbm3, tmp_path / "split.npz"))


@pytest.mark.slow
def test_a_pyg_baseline_trains_on_the_exported_cora_split(tmp_path):
    """Cora's masks come back as Planetoid's own, and plain PyG trains on them as it would on its Data."""
    from torch_geometric.datasets import Planetoid
    from torch_geometric.nn import GCNConv

    from gnn_dist.data.paths import cache_dir

    z = export(cli_partition(tmp_path, "cora", 2), tmp_path / "cora-split.npz")
    load_dataset("cora")  # puts the shipped files where Planetoid reads them
    data = Planetoid(str(cache_dir() / "planetoid"), "Cora")[0]
    for key in MASKS:
        assert np.array_equal(z[key], getattr(data, key).numpy()), key
    train, test = (torch.from_numpy(z[k]) for k in ("train_mask", "test_mask"))
    torch.manual_seed(0)
    c1, c2 = GCNConv(data.num_features, 16), GCNConv(16, 7)
    opt = torch.optim.Adam([*c1.parameters(), *c2.parameters()], lr=0.01, weight_decay=5e-4)
    for _ in range(100):
        opt.zero_grad()
        out = c2(torch.relu(c1(data.x, data.edge_index)), data.edge_index)
        torch.nn.functional.cross_entropy(out[train], data.y[train]).backward()
        opt.step()
    acc = (out.argmax(1)[test] == data.y[test]).float().mean().item()
    assert acc > 0.75, acc


def test_compacted_edge_list_ids_come_with_the_split(tmp_path):
    ids = np.array([7, 90210, 3_000_000_000, 12, 555, 4242])
    src, dst = ids[[0, 1, 2, 3, 4, 5, 0, 2]], ids[[1, 2, 3, 4, 5, 0, 3, 5]]
    np.savetxt(tmp_path / "e.csv", np.stack([src, dst], 1), fmt="%d", delimiter=",")
    z = export(cli_partition(tmp_path, f"edges:{tmp_path / 'e.csv'}", 2), tmp_path / "s.npz")
    assert np.array_equal(z["original_ids"], load_dataset(f"edges:{tmp_path / 'e.csv'}").original_ids)
    assert sorted(z["original_ids"]) == sorted(ids) and all(z[k].shape == (6,) for k in MASKS)


def test_typed_split_is_the_target_types(tmp_path):
    """The target type (papers) comes second, after 50 authors: its ids start at 0 in the export."""
    rng = np.random.default_rng(3)
    writes = np.stack([rng.integers(0, 50, 300), rng.integers(0, 90, 300)])
    cites = rng.integers(0, 90, (2, 200))
    f = tmp_path / "typed.npz"
    np.savez(f, node_types=np.array(["author", "paper"]), target=np.array("paper"), y=rng.integers(0, 3, 90),
             edge_types=np.array(["author:writes:paper", "paper:rev_writes:author", "paper:cites:paper"]),
             **{"x:author": rng.normal(size=(50, 4)), "x:paper": rng.normal(size=(90, 6)),
                "edge_index:author:writes:paper": writes, "edge_index:paper:rev_writes:author": writes[::-1],
                "edge_index:paper:cites:paper": cites})
    part = cli_partition(tmp_path, f"hfile:{f}", 2)
    z = export(part, tmp_path / "s.npz")
    hg = load_dataset(f"hfile:{f}")  # no masks in the file: the loader draws the split, seeded
    assert str(z["target_type"]) == "paper" and z["train_mask"].shape == (90,)
    for key in MASKS:
        assert np.array_equal(z[key], getattr(hg, key)), key
    assert_shares_make_the_split([p.split() for p in parts(part, typed=True)], z)


def test_bad_exports_are_one_line(sbm3, tmp_path):
    one_error_line(run_cli("info", str(sbm3), "--export-split", str(tmp_path / "no" / "s.npz")),
                   "cannot write the split to")
    dyn = cli_partition(tmp_path, "dsbm:nodes=60,communities=2,snapshots=4,avg_degree=4,features=2,seed=1", 1)
    one_error_line(run_cli("info", str(dyn), "--export-split", str(tmp_path / "d.npz")),
                   "holds snapshots: they split by time")
