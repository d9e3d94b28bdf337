"""The cost model (partition.costmodel): counts straight from an assignment agree with the written plans,
predictions follow the model's arithmetic, shared cores floor the epoch, profiles are checked in one line,
and the default partition never predicts slower than node-balanced METIS."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from gnn_dist.data import load_dataset
from gnn_dist.runtime.cgroups import threads_per_rank, usable_cpus
from partition import assign_parts, build_parts
from partition.cost_parts import NODE_BOUND, choose
from partition.costmodel import Workload, layers, predict
from partition.errors import DataError
from partition.machine import DEFAULT, Machine, from_dict, load, save
from partition.part_counts import part_counts, plan_halo_edges, plan_top_reads
from tests.conftest import one_error_line, run_cli, run_mpi

ROUND = Machine(name="round", sparse_per_core=1e9, dense_per_core=1e10, elementwise_per_core=1e9, step_s=0.0,
                cores_per_host=2, ranks_per_host=1, link_bytes_per_s=1e8, latency_s=1e-4)


@pytest.fixture(scope="module")
def rmat():
    return load_dataset("rmat:scale=12,edges=60000,seed=1")


def test_grid_is_a_lattice_and_shuffling_only_renames():
    g2 = load_dataset("grid:width=5,height=4")
    assert (g2.num_nodes, g2.num_edges) == (20, 2 * (4 * 4 + 5 * 3))
    assert sorted(np.bincount(g2.in_degree())[2:5].tolist()) == [4, 6, 10]  # 4 corners, 10 edge points, 6 inside
    g3 = load_dataset("grid:width=3,height=3,depth=3")
    assert g3.num_edges == 2 * 3 * (2 * 3 * 3) and g3.in_degree().max() == 6
    plain, shuffled = load_dataset("grid:width=6,height=5,depth=2"), load_dataset("grid:width=6,height=5,depth=2,shuffle=1")
    assert not np.array_equal(plain.edge_index()[0], shuffled.edge_index()[0])
    # the same lattice: one relabelling maps edges onto edges and classes onto classes
    perm = np.random.default_rng(0).permutation(plain.num_nodes)  # grid's own draw with seed 0
    s, d = plain.edge_index()
    mapped = set(zip(perm[s].tolist(), perm[d].tolist()))
    assert mapped == set(zip(*(a.tolist() for a in shuffled.edge_index())))
    assert np.array_equal(shuffled.y[perm], plain.y)
    with pytest.raises(DataError, match="grid"):
        load_dataset("grid:width=1,height=1")
    for huge in ("width=100000,height=100000,depth=100000", "width=200000,height=200000"):  # refused before allocating
        with pytest.raises(DataError, match="grid: .* nodes"):
            load_dataset(f"grid:{huge}")


@pytest.mark.parametrize("dense", [True, False])  # keys counted in an array, or sorted (large graphs)
def test_counts_from_an_assignment_match_the_written_plans(rmat, dense, monkeypatch):
    import partition.part_counts

    monkeypatch.setattr(partition.part_counts, "DENSE_KEYS", 1 << 40 if dense else 0)
    parts = assign_parts(rmat, 4, "metis")
    src, dst = rmat.edge_index()
    counts = part_counts(src, dst, parts, 4)
    for plan, c in zip(build_parts(rmat, parts, 4), counts):
        assert c == {"inner": plan.num_inner, "central": plan.num_central, "halo": plan.num_halo,
                     "edges": plan.num_edges, "sent": int(plan.send_counts.sum()),
                     "halo_edges": plan_halo_edges(plan.indices, plan.num_inner),
                     "top_reads": plan_top_reads(plan.indices, plan.num_inner, plan.num_inner + plan.num_halo)}
        assert 0 < c["halo_edges"] < c["edges"]


def test_layer_plan_follows_aggregate_first():
    # 32 -> 16: aggregate the 32-wide input (cached halo, no backward product); 16 -> 8: transform first
    first, second = layers(Workload(features=32, classes=8, hidden=16))
    assert (first.width, first.exchanges, first.backward_sparse) == (32, 0, False)
    assert (second.width, second.exchanges, second.backward_sparse) == (8, 2, True)
    wide = layers(Workload(features=500, classes=8, hidden=16))[0]  # 500 > 2 x 16: transform first, exchanged
    assert (wide.width, wide.exchanges) == (16, 2)


def test_prediction_is_the_models_arithmetic():
    """Two ranks, one layer 5 -> 2, worked by hand: every term of the docstring, nothing else."""
    part = {"inner": 1000, "central": 0, "halo": 100, "edges": 5000, "sent": 300}
    work = Workload(features=5, classes=2, hidden=2, layers=1, overlap=False)  # 5 > 2 x 2: transform first
    pred = predict([part, part], work, ROUND)
    r = pred.ranks[0]
    assert r.sparse_s == pytest.approx((5000 + 1000) * 2 * 2 / 1e9)  # width 2, forward and backward
    assert r.dense_s == pytest.approx(2 * 1000 * 5 * 2 * 2 / 1e10)  # forward and weight gradient
    assert r.elementwise_s == pytest.approx(((1000 + 100) * 5 + 2 * 1000 * 2) / 1e9)  # the features: forward only
    assert r.compute_s == pytest.approx((r.sparse_s + r.dense_s + r.elementwise_s) / 2)  # 2 cores, 1 rank
    # two all-to-alls (forward, backward) of max(300, 100) rows x 2 columns x 4 bytes, one peer; the all-reduce
    assert r.wire_s == pytest.approx(2 * (1e-4 + 300 * 2 * 4 / 1e8) + 1e-4)
    assert pred.epoch_s == pytest.approx(r.compute_s + r.wire_s) and pred.bottleneck == "wire"  # 348 > 22 us
    hidden = predict([dict(part, central=1000)] * 2, Workload(5, 2, 2, 1, overlap=True), ROUND).ranks[0]
    assert hidden.wire_s == pytest.approx(max(0.0, r.wire_s - 2 * r.sparse_s / 2 / 2))
    # HaloSpMM computes every read of an inner row while the rows travel, not only the central rows': with
    # 1,500 of the 6,000 reads from halo rows, 3/4 of each direction's product hides wire, though no row is central
    part_he = dict(part, halo_edges=1500)
    overlapped = predict([part_he] * 2, Workload(5, 2, 2, 1, overlap=True), ROUND).ranks[0]
    assert overlapped.wire_s == pytest.approx(max(0.0, r.wire_s - 2 * 0.75 * r.sparse_s / 2 / 2))
    assert overlapped.wire_s < r.wire_s and overlapped.compute_s == pytest.approx(r.compute_s)
    assert predict([dict(part_he, central=1000)] * 2, Workload(5, 2, 2, 1), ROUND).ranks[0].wire_s == \
        pytest.approx(overlapped.wire_s)  # halo_edges, where known, is what counts
    # the bytes' CPU (wire_cpu_s_per_byte): (100 received + 300 sent) rows x 2 columns x 4 bytes an exchange, two
    # exchanges, on the rank's 2 threads, while the rows travel
    busy = predict([part] * 2, work, Machine(**dict(ROUND.__dict__, wire_cpu_s_per_byte=1e-9))).ranks[0]
    assert busy.compute_s == pytest.approx(r.compute_s + 2 * 400 * 2 * 4 * 1e-9 / 2)
    assert busy.elementwise_s == r.elementwise_s  # and it runs while the rows travel, hiding as much of the wire
    assert busy.wire_s == pytest.approx(r.wire_s - 2 * 400 * 2 * 4 * 1e-9 / 2)


def test_ranks_sharing_cores_floor_the_epoch():
    parts = [{"inner": 1000, "central": 1000, "halo": 0, "edges": 10_000, "sent": 0}] * 4
    work = Workload(features=16, classes=4)
    quiet = Machine(**dict(ROUND.__dict__, latency_s=0.0))  # no halo and no latency: compute alone
    apart = predict(parts, work, quiet)  # a host each: 2 threads per rank
    shared = predict(parts, work, Machine(**dict(quiet.__dict__, ranks_per_host=0)))  # 4 ranks on 2 cores
    one_core = apart.ranks[0].sparse_s + apart.ranks[0].dense_s + apart.ranks[0].elementwise_s
    assert apart.epoch_s == pytest.approx(one_core / 2) and apart.bottleneck == "compute"
    assert shared.epoch_s == pytest.approx(4 * one_core / 2) and shared.bottleneck == "shared cores"


def test_profiles_round_trip_and_bad_ones_fail_in_one_line(tmp_path):
    f = tmp_path / "m.json"
    save(ROUND, str(f))
    assert load(str(f)) == ROUND and load(None) == DEFAULT
    good = json.loads(f.read_text())
    for edit, needle in ((dict(good, cores_per_host=0), "cores_per_host"), (dict(good, link_bytes_per_s=-1), "link"),
                         ({k: v for k, v in good.items() if k != "latency_s"}, "lacks the field 'latency_s'"),
                         (dict(good, gpus=1), "unknown field 'gpus'"), (dict(good, dense_per_core="fast"), "dense")):
        with pytest.raises(DataError, match=needle):
            from_dict(edit, "m.json")
    # lying numbers: too large for a float, a rate that would make every prediction inf, NaN, a name not a string
    for edit, needle in ((dict(good, cores_per_host=10 ** 400), "between"), (dict(good, sparse_per_core=1e-320), "between"),
                         (dict(good, step_s=1e308), "between"), (dict(good, latency_s=float("nan")), "number"),
                         (dict(good, name={"a": 1}), "'name'")):
        with pytest.raises(DataError, match=needle):
            from_dict(edit, "m.json")
    f.write_text("{not json")
    with pytest.raises(DataError, match="not JSON"):
        load(str(f))
    # an emulated host: a fraction of a core and the lab's configured link rate; profiles before them still load
    host = dataclasses.replace(ROUND, cores_per_host=0.22, link_rate_bytes_per_s=1.25e8)
    save(host, str(f))
    assert load(str(f)) == host and "0.22 cores per host" in host.describe() and "shaped at 1 Gbit/s" in host.describe()
    old = {k: v for k, v in good.items() if k not in ("link_rate_bytes_per_s", "sparse_row_per_core",
                                                       "sparse_wide_per_core", "dense_wide_per_core")}
    assert from_dict(dict(old, cores_per_host=2), "old.json").cores_per_host == 2


def test_a_wild_measurement_is_refused_and_the_old_profile_kept(tmp_path):
    """CI once timed an empty all-to-all slower than a 1 MiB one: the rate came out 1.05e15 B/s and the
    profile written could not be read back. The rate is now bounded, and save refuses what load would."""
    from gnn_dist.cli.profile_machine import link_rate

    assert link_rate(2, 1 << 20, 1e-4, 5e-4) == pytest.approx((1 << 20) / 4e-4)  # the added time, as before
    assert link_rate(4, 1 << 20, 2.4e-3, 3.8e-3) == pytest.approx(3 * (1 << 20) / 1.4e-3)  # more empty than added: kept
    assert link_rate(2, 1 << 20, 6e-4, 5e-4) == pytest.approx((1 << 20) / 5e-5)  # inverted: 10x the big one's rate
    assert link_rate(4, 1 << 20, 3e-3, 1e-3) == pytest.approx(10 * 3 * (1 << 20) / 1e-3)  # never above that
    f = tmp_path / "m.json"
    save(ROUND, str(f))
    with pytest.raises(DataError, match="link_bytes_per_s"):
        save(dataclasses.replace(ROUND, link_bytes_per_s=1.05e15), str(f))
    assert load(str(f)) == ROUND and not (tmp_path / "m.json.tmp").exists()


def test_default_partition_never_predicts_slower(rmat):
    work = Workload(features=rmat.num_features, classes=rmat.num_classes)

    def run(weights):
        return assign_parts(rmat, 4, "metis", vweights=None if weights is None else weights[:, None])

    choice = choose(rmat, 4, run, work, DEFAULT)
    assert choice.prediction.epoch_s <= choice.considered["node counts"] + 1e-12
    assert choice.name != "node counts"  # on R-MAT the node-balanced partition leaves one rank far busier
    assert choice.considered["node counts"] > 1.05 * choice.prediction.epoch_s, choice.considered
    assert np.bincount(choice.parts, minlength=4).max() <= NODE_BOUND * rmat.num_nodes / 4
    mesh = load_dataset("grid:width=60,height=50")
    mesh_choice = choose(mesh, 4, lambda w: assign_parts(mesh, 4, "metis", vweights=None if w is None else w[:, None]),
                         Workload(features=mesh.num_features, classes=mesh.num_classes), DEFAULT)
    assert mesh_choice.name == "node counts"  # even degrees: nothing to gain, the partition of before stays


def test_another_candidate_is_chosen_only_when_predicted_fastest():
    mesh = load_dataset("grid:width=60,height=50")
    work = Workload(features=mesh.num_features, classes=mesh.num_classes)
    rand = lambda seed: lambda: assign_parts(mesh, 4, "random", seed=seed)  # noqa: E731
    worse = choose(mesh, 4, lambda w: rand(0)(), work, DEFAULT, {"volume": rand(1)})
    assert worse.name == "node counts" and "volume" in worse.considered, worse.considered  # within the margin
    better = choose(mesh, 4, lambda w: rand(0)(), work, DEFAULT,
                    {"volume": lambda: assign_parts(mesh, 4, "metis", objective="vol")})
    assert better.name.startswith("volume"), better.considered  # METIS against random parts: far less halo
    assert better.prediction.epoch_s == min(better.considered.values()) < 0.98 * better.considered["node counts"]


def test_a_candidate_that_leaves_a_part_empty_is_left_out():
    les = load_dataset("nx:les_miserables_graph")  # 77 nodes: METIS's volume objective leaves one of 9 parts empty
    with pytest.raises(DataError):
        assign_parts(les, 9, "metis", objective="vol")
    work = Workload(features=les.num_features, classes=les.num_classes)
    choice = choose(les, 9, lambda w: assign_parts(les, 9, "metis"), work, DEFAULT,
                    {"volume": lambda: assign_parts(les, 9, "metis", objective="vol")})
    assert "volume" not in choice.considered and np.bincount(choice.parts, minlength=9).min() > 0, choice.considered


@pytest.mark.slow  # seconds of subprocess start-up: the full suite runs it, the fast subset has others of its kind
def test_partition_prints_the_busiest_rank_and_refuses_a_bad_profile(tmp_path):
    r = run_cli("partition", "--dataset", "rmat:scale=11,edges=30000,seed=2", "--parts", "4", "--out",
                str(tmp_path / "p"), "--verbose")
    assert r.returncode == 0, r.stderr
    assert "busiest rank" in r.stdout and "bottleneck" in r.stdout and "rank  compute s" in r.stdout
    assert "the shipped default profile" in r.stderr and "predicted epoch by candidate" in r.stderr
    assert "chose volume" in r.stderr  # METIS's volume objective is a candidate of the default (here the winner)...
    meta = json.loads((tmp_path / "p" / "partition.json").read_text())
    assert (meta["chosen_by_cost"], meta["objective"]) == ("volume", "vol"), meta  # ...recorded as what made it
    cut = run_cli("partition", "--dataset", "rmat:scale=11,edges=30000,seed=2", "--parts", "4", "--objective", "cut",
                  "--out", str(tmp_path / "c"))
    assert cut.returncode == 0 and "volume" not in cut.stderr, cut.stderr  # ...unless an objective is asked for
    assert "busiest rank" in cut.stdout and "rank  compute s" not in cut.stdout + cut.stderr  # the table: --verbose
    assert "shipped default profile" not in cut.stderr
    one_error_line(run_cli("partition", "--dataset", "karate", "--parts", "2", "--method", "random", "--objective",
                           "cut", "--out", str(tmp_path / "r")), "applies to --method metis and mtkahypar")
    typed = run_cli("partition", "--dataset", "hsbm:papers=300,authors=200", "--parts", "2", "--out", str(tmp_path / "t"))
    assert typed.returncode == 0 and "cost model" not in typed.stderr, typed.stderr  # not priced: not named
    (tmp_path / "bad.json").write_text(json.dumps({"name": "x"}))
    one_error_line(run_cli("partition", "--dataset", "cora", "--parts", "2", "--out", str(tmp_path / "q"),
                           "--machine", str(tmp_path / "bad.json")), "lacks the field", strict=False)


def test_refine_on_the_default_is_kept_only_when_predicted_faster(tmp_path):
    # behind a link that costs nothing, refining (fewer rows on the busiest link, more halo in all) can only
    # add work: predicted slower, so left out
    spec, free = "rmat:scale=13,edges=100000,seed=1", tmp_path / "free-link.json"
    save(dataclasses.replace(DEFAULT, name="free-link", link_bytes_per_s=1e12, latency_s=0.0), str(free))
    plain = run_cli("partition", "--dataset", spec, "--parts", "4", "--machine", str(free), "--out", str(tmp_path / "a"))
    refined = run_cli("partition", "--dataset", spec, "--parts", "4", "--refine", "--machine", str(free), "--out",
                      str(tmp_path / "b"))
    assert plain.returncode == refined.returncode == 0, refined.stderr
    assert "refinement left out" in refined.stderr, refined.stderr
    from partition.store import read_meta, read_node_map

    a, b = (read_node_map(tmp_path / d, read_meta(tmp_path / d)) for d in "ab")
    assert np.array_equal(a, b)


def test_balance_nodes_is_the_node_balanced_partition(tmp_path):
    spec = "rmat:scale=11,edges=30000,seed=2"
    r = run_cli("partition", "--dataset", spec, "--parts", "3", "--balance", "nodes", "--out", str(tmp_path / "p"))
    assert r.returncode == 0, r.stderr
    assert "predicted epoch by candidate" not in r.stderr
    from partition.store import read_meta, read_node_map

    expected = assign_parts(load_dataset(spec), 3, "metis")
    assert np.array_equal(read_node_map(tmp_path / "p", read_meta(tmp_path / "p")), expected)


@pytest.mark.slow
@pytest.mark.slow
def test_every_rank_logs_compute_and_wait_and_info_sets_them_beside_the_prediction(tmp_path):
    part = tmp_path / "p"
    r = run_cli("partition", "--dataset", "sbm:nodes=3000,classes=6,avg_degree=8,features=16,seed=3", "--parts", "2",
                "--out", str(part))
    assert r.returncode == 0, r.stderr
    log = tmp_path / "run.jsonl"
    run = run_mpi(2, "train", "--partition", str(part), "--epochs", "3", "--log", str(log), "--progress", "lines")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    pred = records[0]["prediction"]
    assert pred["machine"] == "default" and len(pred["rank_compute_s"]) == 2
    # the threads each rank chose (its CPUs over the 2 unbound ranks of this host), printed once and logged once
    threads = threads_per_rank(usable_cpus(), 2)
    assert records[0]["rank_threads"] == [threads, threads] and "rank_threads" not in records[1]
    assert records[0]["rank_usable_cpus"] == [pytest.approx(usable_cpus(), abs=1e-4)] * 2
    assert run.stderr.count(f"[gnn-dist] {threads} thread") == 1, run.stderr
    epochs = [x for x in records if "epoch_time" in x]
    assert len(epochs) == 3
    for x in epochs:
        assert len(x["rank_compute_s"]) == len(x["rank_wait_s"]) == 2
        assert min(x["rank_compute_s"]) > 0 and min(x["rank_wait_s"]) >= 0
        # rank 0's own epoch is the logged one: its compute and wait add up to it
        assert x["rank_compute_s"][0] + x["rank_wait_s"][0] == pytest.approx(x["epoch_time"], abs=1e-5)
        # halo bytes: rank 0's are its channels' own, and what all ranks sent all ranks received
        train = [c for name, c in x["halo"].items() if not name.endswith("eval")]
        assert x["rank_sent_bytes"][0] == sum(sum(c["bytes"]) for c in train) > 0
        assert x["rank_recv_bytes"][0] == sum(c["recv_bytes"] for c in train)
        assert sum(x["rank_sent_bytes"]) == sum(x["rank_recv_bytes"])
        assert 0 < x["rank_overlap_s"][0] == pytest.approx(sum(c["overlap_s"] for c in train), abs=1e-5)
    info = run_cli("info", "--run", str(log))
    assert info.returncode == 0, info.stderr
    assert "pred compute" in info.stdout and "predicted" in info.stdout and "busiest rank" in info.stdout


def test_info_run_reads_old_cut_and_garbage_logs(tmp_path):
    """Logs from before per-rank times, a last line cut mid-write, and garbage: a summary or one line, no traceback."""
    from gnn_dist.cli.info import summarise_run

    pred = {"machine": "m", "epoch_s": 0.5, "busiest": 1, "bottleneck": "wire", "rank_compute_s": [0.1, 0.2],
            "rank_wire_s": [0.3, 0.3]}
    epoch = {"epoch": 0, "loss": 1.0, "epoch_time": 0.0, "rank_compute_s": [0.0, 0.0], "rank_wait_s": [0.0, 0.0]}
    log = tmp_path / "run.jsonl"
    log.write_text(json.dumps({"epoch": 0, "loss": 1.0, "epoch_time": 0.4}) + "\n")  # before this change
    assert "1 epochs" in summarise_run(str(log)) and "per rank" not in summarise_run(str(log))
    log.write_text(json.dumps(dict(epoch, prediction=pred)) + "\n" + json.dumps(epoch)[:30])  # killed mid-write
    text = summarise_run(str(log))
    assert "1 epochs" in text and "cut off" in text and "busiest rank 1" in text  # a zero epoch divides nothing
    # a measured fixed epoch is in the predicted epoch but in no rank's compute or wire: said beside it
    log.write_text(json.dumps(dict(epoch, prediction=dict(pred, fixed_s=0.2))) + "\n")
    assert "predicted 0.5000 s, of which the profile's fixed epoch 0.2000 s" in summarise_run(str(log))
    for lie in ("x", True, None, 0.0):
        log.write_text(json.dumps(dict(epoch, prediction=dict(pred, fixed_s=lie))) + "\n")
        assert "predicted 0.5000 s (" in summarise_run(str(log))
    for bad in ("5", json.dumps(dict(epoch, rank_compute_s=None)), json.dumps(dict(epoch, rank_wait_s=[0.0])),
                json.dumps(dict(epoch, prediction={"machine": "m"})), json.dumps(dict(epoch, epoch_time="x")),
                json.dumps(dict(epoch, halo=3))):
        log.write_text(bad + "\n")
        with pytest.raises(DataError, match="line 1"):
            summarise_run(str(log))
    log.write_bytes(b"\xff\xfe garbage")
    one_error_line(run_cli("info", "--run", str(log)), "not text")


def test_rates_measured_under_a_quota_are_a_whole_cores():
    """A thread under a 0.25-core quota measures a quarter of a core's rates and four times its step: the
    profile stores a whole core's, and the model prices the host at its 0.25 core."""
    from gnn_dist.cli.core_rates import per_core

    measured = {"sparse_per_core": 1e8, "dense_per_core": 2e9, "elementwise_per_core": 5e7, "step_s": 4e-3,
                "cache_bytes": 1e6, "sparse_hot_per_core": 2e8}
    whole = per_core(measured, 0.25)
    assert whole == {"sparse_per_core": 4e8, "dense_per_core": 8e9, "elementwise_per_core": 2e8, "step_s": 1e-3,
                     "cache_bytes": 1e6, "sparse_hot_per_core": 8e8}
    assert per_core(measured, 1.0) == measured


@pytest.mark.slow  # two partition runs in subprocesses
def test_a_partition_records_the_shape_it_was_priced_for_and_train_names_a_different_one(tmp_path):
    """partition.json's priced_for holds --model, --hidden, --layers and --codec; a run of another shape gets
    one line with what the model predicts for the shape actually run; the same shape (another built-in model
    has GCN's plan), a run the model cannot price, or a partition it did not price, none."""
    import argparse

    from gnn_dist.cli.cost_report import shape_note

    r = run_cli("partition", "--dataset", "karate", "--parts", "2", "--out", str(tmp_path / "p"), "--hidden", "64",
                "--layers", "3", "--codec", "int8")
    assert r.returncode == 0 and "hidden 64, 3 layers, int8 rows" in r.stdout, r.stdout + r.stderr
    meta = json.loads((tmp_path / "p" / "partition.json").read_text())
    assert meta["priced_for"] == {"model": "gcn", "hidden": 64, "layers": 3, "codec": "int8"}
    run = lambda **kw: argparse.Namespace(**dict(  # noqa: E731 - train's flags as parsed
        dict(partition="p", model="gcn", hidden=64, layers=3, codec="int8", exchange="flags", staleness=0,
             skip_threshold=0.0, no_overlap=False, machine_profile=DEFAULT), **kw))
    assert shape_note(run(), meta, 4) is None
    note = shape_note(run(hidden=16, codec="fp32"), meta, 4)
    work = lambda h, c: Workload(meta["num_features"], 4, h, 3, codec=c)  # noqa: E731
    parts = [dict(p, sent=s) for p, s in zip(meta["parts"], meta["stats"]["send_per_part"])]
    now, then = predict(parts, work(16, "fp32"), DEFAULT).epoch_s, predict(parts, work(64, "int8"), DEFAULT).epoch_s
    assert note == (f"note: p was partitioned for --model gcn --hidden 64 --layers 3 --codec int8, this run has "
                    f"--hidden 16, --codec fp32: the cost model predicts {now:.4g} s an epoch for it ({then:.4g} s for "
                    f"the shape partitioned for); partition again with --hidden 16, --codec fp32 for a default "
                    f"partition chosen for this run"), note
    assert shape_note(run(model="sage"), meta, 4) is None
    assert shape_note(run(codec="adaptive"), meta, 4) is None and shape_note(run(model="mine:build"), meta, 4) is None
    assert shape_note(run(hidden=16), {k: v for k, v in meta.items() if k != "priced_for"}, 4) is None  # older
    r = run_cli("partition", "--dataset", "karate", "--parts", "2", "--out", str(tmp_path / "n"), "--balance", "nodes")
    assert r.returncode == 0 and json.loads((tmp_path / "n" / "partition.json").read_text())["priced_for"] is None


def test_the_codec_prices_the_wire():
    """int8 rows of 64 values cost 72 bytes against fp32's 256: a wire-bound rank's meetings shrink so."""
    from partition.costmodel import rank_phases

    part = {"inner": 1000, "central": 0, "halo": 1000, "sent": 1000, "edges": 0}
    slow_link = dataclasses.replace(DEFAULT, link_bytes_per_s=1e6, latency_s=0.0, link_burst_bytes=0.0)
    plan = layers(Workload(features=64, classes=64, hidden=64, layers=3))
    wire = lambda codec: [ph.wire_s for ph in rank_phases(part, plan, slow_link, 1, 1, False, codec=codec)]  # noqa: E731
    fp32, int8 = wire("fp32"), wire("int8")
    assert [w for w in fp32 if w] == pytest.approx([0.256] * 4) and [w for w in int8 if w] == pytest.approx([0.072] * 4)


def test_a_sparse_products_per_row_work_is_measured_and_priced():
    """Per row-column, an edge costs 1 ns from cache (3 from memory) and the row 4 ns: 10 edges a row take
    14 ns (34 cold), one edge 5 ns. The split gives back 1, 3 and 4 ns; a part of 4 edges a row (a grid's) is
    then priced at its 5 reads a row plus the row, where the folded-in rate would price its reads alone."""
    from gnn_dist.cli.core_rates import split_row_cost
    from partition.step_work import sparse_seconds

    cold, hot, row = split_row_cost(10 / 34e-9, 10 / 14e-9, 1 / 5e-9, 10)
    assert (cold, hot, row) == pytest.approx((1 / 3e-9, 1 / 1e-9, 1 / 4e-9))
    assert split_row_cost(1e9, 2e9, 2e9, 10) == (1e9, 2e9, 0.0)  # one edge no dearer than ten: noise, not measured
    grid = {"inner": 1000, "halo": 0, "edges": 4000}
    layer = layers(Workload(features=8, classes=8, hidden=8))[1]
    flat = dataclasses.replace(DEFAULT, sparse_per_core=1 / 3e-9, cache_bytes=0.0)
    rowed = dataclasses.replace(flat, sparse_row_per_core=1 / 4e-9)
    assert sparse_seconds(grid, layer, flat) == pytest.approx(5000 * 3e-9 * layer.width)
    assert sparse_seconds(grid, layer, rowed) == pytest.approx((5000 * 3e-9 + 1000 * 4e-9) * layer.width)
