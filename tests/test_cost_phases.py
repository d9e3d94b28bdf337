"""The epoch priced phase by phase (partition.phases): ranks sharing cores finish by processor sharing, each
meeting waits for the last rank, and a prediction is the sum of its phases, worked by hand."""
from __future__ import annotations

import dataclasses

import pytest

from partition.costmodel import predict, rank_phases, through_bucket
from partition.machine import Machine
from partition.phases import Phase, epoch, shared_makespan
from partition.step_work import Workload, layers, rank_work

# sparse products at 1e9 edge-columns/s; dense and elementwise work too fast to count; no fixed cost, no latency
SPARSE_ONLY = Machine(name="sparse-only", sparse_per_core=1e9, dense_per_core=1e15, elementwise_per_core=1e15,
                      step_s=0.0, cores_per_host=2, ranks_per_host=0, link_bytes_per_s=1e8, latency_s=0.0)


def test_processor_sharing_worked_by_hand():
    # 4 ranks on 2 cores: 4 at half a core to 7.1 (14.2), 3 at 2/3 for 5.8 more (8.7), then 0.3 and 7.2 at a core
    assert shared_makespan([12.9, 20.4, 7.1, 13.2], 2) == pytest.approx(30.4)
    assert shared_makespan([12.9, 20.4, 7.1, 13.2], 4) == pytest.approx(20.4)  # a core each: the slowest
    assert shared_makespan([5.0] * 4, 2) == pytest.approx(10.0)  # even work: the sum over the cores
    assert shared_makespan([1.0, 9.0, 0.0], 1) == pytest.approx(10.0)  # one core: one after the other
    assert shared_makespan([1.0, 1.0, 10.0], 2) == pytest.approx(1.5 + 9.0)  # 3 at 2/3 until two are done
    assert shared_makespan([], 2) == 0.0


def test_each_meeting_waits_for_the_last_rank():
    # busy in opposite phases: the epoch is the two phases' slowest (20), not the busiest rank's total (10)
    ranks = [[Phase(10.0), Phase(0.0)], [Phase(0.0), Phase(10.0)]]
    assert epoch(ranks, [[0], [1]], 1).seconds == pytest.approx(20.0)
    # on one host with one core the two share it: 10 + 10 as well, all of it compute, none of it sharing
    assert epoch(ranks, [[0, 1]], 1).seconds == pytest.approx(20.0)
    # a meeting lasts its wire or what ranks compute meanwhile, whichever is longer
    e = epoch([[Phase(2.0, 3.0, 5.0), Phase(2.0, 6.0, 5.0)]], [[0]], 1)
    assert (e.seconds, e.compute_s, e.wire_s, e.sharing_s) == pytest.approx((2 + 5 + 2 + 6, 13.0, 2.0, 0.0))
    # two ranks on one core, 3 ms each and 4 ms overlapped each: 6 + max(1, 8)
    e = epoch([[Phase(3.0, 4.0, 1.0)], [Phase(3.0, 4.0, 1.0)]], [[0, 1]], 1)
    assert (e.seconds, e.compute_s, e.wire_s, e.sharing_s) == pytest.approx((14.0, 7.0, 0.0, 7.0))


def test_prediction_is_the_phases_sum_on_shared_cores():
    """Four ranks of uneven sparse work on 2 cores, every other term zero: the worked example, once per
    product. Layer 0 (16 -> 16, aggregated, input cached) runs before the first meeting; layer 1 (16 -> 4,
    transformed first) computes its central rows (all of them) while each of its two all-to-alls travels."""
    reads = [7100, 12900, 13200, 20400]  # edges + self loops per part
    parts = [{"inner": 100, "central": 100, "halo": 0, "sent": 0, "edges": r - 100} for r in reads]
    work = Workload(features=16, classes=4, hidden=16)
    pred = predict(parts, work, SPARSE_ONLY)
    per_column = 30400 / 1e9  # shared_makespan of the reads, in seconds per column of a product
    assert pred.epoch_s == pytest.approx(per_column * (16 + 4 + 4), rel=1e-6)
    # max(busiest, host's work over its cores) would give the busiest rank's 20400 per column
    assert pred.epoch_s > 1.1 * max(sum(reads) / 2, max(reads)) * 24 / 1e9
    assert pred.bottleneck == "compute" and pred.busiest == 3
    assert pred.sharing_s == pytest.approx((30400 - 20400) * 24 / 1e9, rel=1e-5)
    # a fixed epoch larger than all of that is named as the bottleneck, not "compute"
    fixed = predict(parts, work, dataclasses.replace(SPARSE_ONLY, epoch_fixed_s=0.01))
    assert fixed.epoch_s == pytest.approx(pred.epoch_s + 0.01) and fixed.bottleneck == "fixed epoch"
    assert "bottleneck fixed epoch: what every epoch costs" in fixed.summary()


@pytest.mark.parametrize("features,layers_", [(16, 2), (500, 3), (8, 3)])
def test_phases_hold_all_of_a_ranks_work(features, layers_):
    """Whatever the layer plan (aggregated or transformed first, exchanged or cached), the phases split the
    rank's work without losing or doubling any; each exchange and the all-reduce end one phase."""
    part = {"inner": 1000, "central": 300, "halo": 200, "sent": 150, "edges": 9000}
    work = Workload(features=features, classes=4, hidden=16, layers=layers_)
    plan = layers(work)
    sparse, dense, elem = rank_work(part, plan)
    phases = rank_phases(part, plan, SPARSE_ONLY, 1, 3, overlap=True)
    assert len(phases) == sum(la.exchanges for la in plan) + 1
    total = sum(ph.work_s + ph.overlap_s for ph in phases)
    assert total == pytest.approx(sparse / 1e9 + dense / 1e15 + elem / 1e15, rel=1e-12)
    assert all(ph.overlap_s == 0.0 for ph in rank_phases(part, plan, SPARSE_ONLY, 1, 3, overlap=False))
    # with halo_edges (the overlapped share) and the wire's CPU: the same work, and each exchange's bytes
    # (200 received + 150 sent rows, at the layer's width) once, while they travel
    wired = dataclasses.replace(SPARSE_ONLY, wire_cpu_s_per_byte=1e-9)
    both = rank_phases(dict(part, halo_edges=2500), plan, wired, 1, 3, overlap=True)
    cpu = sum(la.exchanges * 350 * la.width * 4 * 1e-9 for la in plan)
    assert sum(ph.work_s + ph.overlap_s for ph in both) == pytest.approx(total + cpu, rel=1e-12)
    assert sum(ph.overlap_s for ph in both) > sum(ph.overlap_s for ph in phases)  # 7,500 of 10,000 reads, not 300 of 1,000 rows'
    assert all(ph.overlap_s == 0.0 for ph in rank_phases(dict(part, halo_edges=2500), plan, SPARSE_ONLY, 1, 3,
                                                         overlap=False))


def test_a_measured_fixed_epoch_replaces_the_step_and_the_latency():
    """With `epoch_fixed_s` (measured among the ranks) the epoch is that plus the phases of the graph's work:
    the step's fixed cost and the meetings' latency are inside it, not counted again."""
    parts = [{"inner": 100, "central": 50, "halo": 40, "sent": 30, "edges": r - 100} for r in (7100, 20400)]
    work = Workload(features=16, classes=4, hidden=16)
    slow = dataclasses.replace(SPARSE_ONLY, step_s=0.5, latency_s=0.25)  # would dwarf everything if counted
    bare = predict(parts, work, dataclasses.replace(SPARSE_ONLY, step_s=0.0, latency_s=0.0)).epoch_s
    with_step = predict(parts, work, slow).epoch_s
    assert with_step > bare + 0.5  # without the measurement, the step and latencies count
    fixed = predict(parts, work, dataclasses.replace(slow, epoch_fixed_s=0.016))
    assert fixed.epoch_s == pytest.approx(bare + 0.016, rel=1e-12)
    # nor in each rank's compute and wire (what `partition` and `info --run` print beside the epoch)
    alone = predict(parts, work, dataclasses.replace(SPARSE_ONLY, epoch_fixed_s=0.016)).ranks
    assert [(r.compute_s, r.wire_s) for r in fixed.ranks] == [(r.compute_s, r.wire_s) for r in alone]
    assert max(r.epoch_s for r in fixed.ranks) + 0.016 <= fixed.epoch_s * (1 + 1e-12)


def test_a_bucket_refills_in_wall_seconds_on_the_ranks_threads():
    """The link's bucket refills while the rank computes, for as long as that takes on its threads: one
    rank of a 2-core host computes a phase's one-core seconds in half of them, so the bucket refills half."""
    part = {"inner": 1000, "central": 0, "halo": 1000, "sent": 1000, "edges": 9000}
    plan = layers(Workload(features=500, classes=4, hidden=16))  # layer 0 transformed first: 4 meetings of 64 KB
    link = dataclasses.replace(SPARSE_ONLY, link_bytes_per_s=1e6, link_burst_bytes=64000.0, step_s=0.002)
    alone = rank_phases(part, plan, link, 1, 0, overlap=False)  # no peers: the phases' work, no wire
    sizes = [1000 * la.width * 4 for la in plan for _ in range(la.exchanges)]
    sizes = sizes[::2] + sizes[1::2][::-1] + [0.0]  # forward meetings, then backward in reverse
    for threads in (1, 2):
        wires = through_bucket(sizes, [ph.work_s / threads + 0.002 / len(alone) for ph in alone], link)
        got = [ph.wire_s for ph in rank_phases(part, plan, link, 1, 1, overlap=False, threads=threads)]
        assert got == pytest.approx(wires, rel=1e-12) and any(0.0 < w < 0.064 for w in wires)
    assert rank_phases(part, plan, link, 1, 1, False, threads=2)[1].wire_s > rank_phases(part, plan, link, 1, 1, False)[1].wire_s


def test_a_token_bucket_refills_while_the_rank_computes():
    """300 bytes at two meetings, 1 s and 0.5 s of computing before them, 100 B/s, a 200-byte bucket: in the
    steady state the bucket holds 100 bytes at the first meeting (refilled for 1 s) and 50 at the second."""
    link = dataclasses.replace(SPARSE_ONLY, link_bytes_per_s=100.0, link_burst_bytes=200.0)
    assert through_bucket([300.0, 300.0, 0.0], [1.0, 0.5, 0.0], link) == pytest.approx([2.0, 2.5, 0.0])
    unshaped = dataclasses.replace(link, link_burst_bytes=0.0)
    assert through_bucket([300.0, 300.0, 0.0], [1.0, 0.5, 0.0], unshaped) == pytest.approx([3.0, 3.0, 0.0])


def test_linear_maps_fall_on_their_side_of_each_exchange():
    """Dense work only, by hand: a layer that transforms first computes X W before its forward all-to-all
    and its weight gradient after the backward one; one that aggregates first the other way round
    (gnn_dist.nn.conv.aggregate_first). Phases: each exchange's work before it, then the all-reduce's."""
    dense_only = dataclasses.replace(SPARSE_ONLY, sparse_per_core=1e15, dense_per_core=1e9)
    part = {"inner": 1000, "central": 0, "halo": 10, "sent": 10, "edges": 0}

    def works(features: int, classes: int) -> list[float]:
        plan = layers(Workload(features=features, classes=classes, hidden=16))
        return [ph.work_s + ph.overlap_s for ph in rank_phases(part, plan, dense_only, 1, 0, overlap=False)]

    # 500 -> 16 -> 4, both transformed first: X W (16 ms), then H W (0.128 ms) before their exchanges;
    # backward: layer 1's gradients go out first, its weight and input gradients (2 x 0.128) after, and
    # layer 0's weight gradient (16 ms) after its exchange, before the all-reduce
    d0, d1 = 2 * 1000 * 500 * 16 / 1e9, 2 * 1000 * 16 * 4 / 1e9
    assert works(500, 4) == pytest.approx([d0, d1, 0.0, 2 * d1, d0], abs=1e-9)
    # 16 -> 16 -> 64: layer 0 cached (no exchange), layer 1 aggregates first: its map after the forward
    # exchange, its weight and input gradients (2 x) before the backward one
    d0, d1 = 2 * 1000 * 16 * 16 / 1e9, 2 * 1000 * 16 * 64 / 1e9
    assert works(16, 64) == pytest.approx([d0, 3 * d1, d0], abs=1e-9)


def test_a_host_of_a_fraction_of_a_core_computes_at_that_fraction():
    """An emulated host at 0.22 core (a CPU quota), one rank each: every rank is priced at its own host's
    0.22 core, with no sharing between hosts; the meetings still wait for the slowest rank."""
    parts = [{"inner": 1000, "central": 1000, "halo": 0, "sent": 0, "edges": 9000},
             {"inner": 1000, "central": 1000, "halo": 0, "sent": 0, "edges": 3000}]
    work = Workload(features=16, classes=4, hidden=16)
    whole = dataclasses.replace(SPARSE_ONLY, cores_per_host=1, ranks_per_host=1)
    quota = dataclasses.replace(whole, cores_per_host=0.22)
    one, fifth = predict(parts, work, whole), predict(parts, work, quota)
    assert one.epoch_s == pytest.approx(predict(parts[:1], work, whole).epoch_s)  # the busier part sets it
    assert fifth.epoch_s == pytest.approx(one.epoch_s / 0.22) and fifth.bottleneck == "compute"
    # each rank's own figures too (the summary's and info --run's predicted compute)
    assert [r.compute_s for r in fifth.ranks] == pytest.approx([r.compute_s / 0.22 for r in one.ranks])
    assert fifth.ranks[0].epoch_s == pytest.approx(fifth.epoch_s)


def test_the_bucket_refills_at_the_configured_rate():
    """tc tbf refills at the rate it was given (1000 B/s), although gloo gets only 100 B/s through the link:
    after 0.1 s of computing the 200-byte bucket holds 100 bytes again, not 10."""
    link = dataclasses.replace(SPARSE_ONLY, link_bytes_per_s=100.0, link_burst_bytes=200.0)
    configured = dataclasses.replace(link, link_rate_bytes_per_s=1000.0)
    assert through_bucket([300.0, 0.0], [0.1, 0.0], configured) == pytest.approx([2.0, 0.0])
    assert through_bucket([300.0, 0.0], [0.1, 0.0], link) == pytest.approx([2.9, 0.0])


def test_the_features_dropout_runs_forward_only():
    """The input's features need no gradient: the first layer's dropout over them (inner and halo rows) is one
    pass a step, every later layer's input and every output two (forward and backward)."""
    part = {"inner": 1000, "central": 300, "halo": 200, "sent": 150, "edges": 9000}
    plan = layers(Workload(features=64, classes=4, hidden=16, layers=2))
    _, _, elem = rank_work(part, plan)
    assert elem == (1000 + 200) * 64 + 2 * 1000 * 16 + 2 * 1000 * 16 + 2 * 1000 * 4
