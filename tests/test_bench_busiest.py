"""scripts/bench_busiest.py without root: its lab list, and its tables from a results file (medians over the
repeats, the model's error, the busiest rank against the mean, the default against --balance nodes)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import bench_busiest  # noqa: E402

RMAT = bench_busiest.GRAPHS["rmat"]


def test_hosts_are_read_as_count_by_cores():
    assert bench_busiest.hosts_list("4x0.45,8x0.22") == [(4, 0.45), (8, 0.22)]
    with pytest.raises(argparse.ArgumentTypeError, match="PxC"):
        bench_busiest.hosts_list("4,0.45")
    with pytest.raises(argparse.ArgumentTypeError, match="at least 2 hosts"):
        bench_busiest.hosts_list("1x0.22")  # one host has no link to profile


def row(partition: str, rep: int, epoch: float, predicted: float, compute: list) -> dict:
    return {"kind": "busiest", "graph": RMAT, "P": 4, "cores": 0.45, "rate": "1gbit", "partition": partition,
            "rep": rep, "epoch_s": epoch, "predicted_s": predicted, "rank_compute_s": compute}


def test_tables_take_medians_over_repeats(tmp_path, capsys):
    rows = [row("default", 0, 2.0, 2.1, [1.0, 1.0, 1.0, 1.0]), row("default", 1, 2.2, 2.1, [1.2, 1.0, 1.0, 0.8]),
            row("default", 2, 9.0, 2.1, [2.0, 1.0, 0.5, 0.5]),  # one slow run: the median ignores it
            row("nodes", 0, 4.0, 3.0, [2.0, 1.0, 0.5, 0.5]), row("nodes", 1, 4.4, 3.0, [2.0, 1.0, 0.5, 0.5])]
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    bench_busiest.table(SimpleNamespace(results=results, repredict=False, profiles=None))
    out = capsys.readouterr().out
    # the default's median epoch 2.2, predicted 2.1 (0.95x), busiest over mean: median of 1.0, 1.2, 2.0
    assert "| `rmat` | 4 x 0.45 core | 1gbit | 3 | 2.200 | 2.000-9.000 | 2.100 | 0.95 | 1.20 |" in out
    assert "within 20%: 1 of 1" in out
    # against --balance nodes (median 4.2): 2.2 / 4.2
    assert "| `rmat` | 4 x 0.45 core | 1gbit | default | 3 | 2.200 | 2.000-9.000 | 0.52 | 1.20 |" in out
    assert "| `rmat` | 4 x 0.45 core | 1gbit | nodes | 2 | 4.200 | 4.000-4.400 | 1.00 | 2.00 |" in out
    with pytest.raises(SystemExit, match="--profiles .*not a folder"):  # a set of profiles that is not there
        bench_busiest.table(SimpleNamespace(results=results, repredict=True, profiles=[tmp_path / "gone"]))
    with pytest.raises(SystemExit, match="give --repredict"):  # the logged predictions would ignore them
        bench_busiest.table(SimpleNamespace(results=results, repredict=False, profiles=[tmp_path]))
    with pytest.raises(SystemExit, match="--zero sparse_per_cor: not an optional profile field"):
        bench_busiest.table(SimpleNamespace(results=results, repredict=True, profiles=None, zero=["sparse_per_cor"]))


def test_repredict_counts_halo_edges_of_partitions_made_before_the_field(tmp_path, capsys):
    """A partition.json without halo_edges (made before it was kept) is priced with the count taken from its
    part files: the same count, so the same prediction, as a partition that kept it."""
    from partition.part_counts import parts_from_meta
    from partition.store import read_meta
    from tests.conftest import run_cli

    out = tmp_path / "p"
    r = run_cli("partition", "--dataset", "rmat:scale=10,edges=8000", "--parts", "3", "--balance", "nodes",
                "--out", str(out))
    assert r.returncode == 0, r.stderr
    kept = parts_from_meta(read_meta(out))
    assert all(p["halo_edges"] for p in kept)
    meta = json.loads((out / "partition.json").read_text())
    for p in meta["parts"]:
        del p["halo_edges"]
    (out / "partition.json").write_text(json.dumps(meta))
    old = parts_from_meta(read_meta(out))
    assert [p["halo_edges"] for p in old] == [None] * 3
    assert bench_busiest.with_halo_edges(old, out) == kept
    # priced with the lab's profile in the work folder, or with the one of the same lab in --profiles' folder
    import dataclasses

    from partition.machine import DEFAULT, save

    (tmp_path / "again").mkdir()
    save(DEFAULT, str(tmp_path / "machine-3x0.45-1gbit.json"))
    save(dataclasses.replace(DEFAULT, sparse_per_core=DEFAULT.sparse_per_core / 100, dense_per_core=DEFAULT.dense_per_core / 100,
                             elementwise_per_core=DEFAULT.elementwise_per_core / 100),
         str(tmp_path / "again" / "machine-3x0.45-1gbit.json"))
    row = {"graph": "rmat", "P": 3, "cores": 0.45, "rate": "1gbit", "partition": "nodes", "folder": str(out)}
    first, again = bench_busiest.repredict(row, tmp_path), bench_busiest.repredict(row, tmp_path, profiles=[tmp_path / "again"])
    assert again > 2 * first  # its cores 100x slower: a graph this small still pays the latency
    # several folders: each field the median over them, so one wild profile among three moves nothing
    assert bench_busiest.repredict(row, tmp_path, profiles=[tmp_path / "again"] * 2 + [tmp_path]) == again
    assert bench_busiest.repredict(row, tmp_path, profiles=[tmp_path / "again", tmp_path, tmp_path]) == first
    # the table with several sets: priced by their medians, and beside it what each set alone predicts
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps(dict(row, kind="busiest", partition="default", rep=0, epoch_s=first,
                                       predicted_s=0.0, rank_compute_s=[1.0, 1.0, 1.0])) + "\n")
    sets = [tmp_path, tmp_path / "again", tmp_path / "again"]
    bench_busiest.table(SimpleNamespace(results=results, work=tmp_path, repredict=True, profiles=sets, zero=[]))
    out = capsys.readouterr().out
    assert f"| {again:.3f} | {again / first:.2f} |" in out and f"| 1.00-{again / first:.2f} | 1.00 |" in out
    assert "within 20%: 0 of 1" in out and "within 20% by every set: 0, by at least one: 1" in out
    bench_busiest.spread(SimpleNamespace(profiles=sets))  # every rate of one lab 100x apart between the sets
    assert "| `sparse_per_core` | 1 | 100.00 | 100.00 | 100.00 |" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="at least twice"):
        bench_busiest.spread(SimpleNamespace(profiles=[tmp_path]))
    # a lying profile, or one lab's profiles of different hosts: one line each
    lie = tmp_path / "lie"
    lie.mkdir()
    (lie / "machine-3x0.45-1gbit.json").write_text('{"name": 1}')
    with pytest.raises(SystemExit, match="^bench_busiest: spread: machine profile .*'name' must be"):
        bench_busiest.spread(SimpleNamespace(profiles=[tmp_path, lie]))
    save(dataclasses.replace(DEFAULT, cores_per_host=0.22), str(lie / "machine-3x0.45-1gbit.json"))
    with pytest.raises(SystemExit, match="different hosts"):
        bench_busiest.spread(SimpleNamespace(profiles=[tmp_path, lie]))
    with pytest.raises(SystemExit, match="gone: not a folder"):
        bench_busiest.spread(SimpleNamespace(profiles=[tmp_path, tmp_path / "gone"]))
    # a field set to 0 prices as a profile that never measured it
    faster = dataclasses.replace(DEFAULT, sparse_wide_per_core=4 * DEFAULT.sparse_per_core)
    save(faster, str(tmp_path / "machine-3x0.45-1gbit.json"))
    assert bench_busiest.repredict(row, tmp_path, zero=["sparse_wide_per_core"]) == first
