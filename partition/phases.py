"""An epoch as phases between meetings, and ranks that share a host's cores (processor sharing).

Every all-to-all (a layer's forward or backward exchange) and the gradients' all-reduce is a meeting: no
rank gets past it before the last rank has arrived. So an epoch is not the busiest rank's whole work but
the sum, over the stretches between consecutive meetings (phases), of the last arrival in each: a rank
busy in the forward pass and idle in the backward one does not make up in one what it lost in the other.

Ranks on one host share its cores. With more runnable ranks than cores, the kernel's scheduler gives each
an equal share: n ranks on C < n cores each progress at C / n of a core, and a rank that finishes its
phase's work (and blocks in the meeting, without burning a core: measured, docs/benchmarks.md) frees its
share for the rest (`shared_makespan`). With n <= C every rank runs alone: the phase takes its slowest.
torch-free (partition/ never imports torch).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Phase:
    """One rank's stretch up to a meeting, in seconds as if the rank ran alone on its threads."""

    work_s: float  # computed before the rank arrives at the meeting
    overlap_s: float = 0.0  # computed while the meeting's rows travel (inner rows' reads, the wire's CPU), after arriving
    wire_s: float = 0.0  # the meeting itself: latency per peer and the bytes at the link's rate (0: no meeting)


def shared_makespan(works: Sequence[float], slots: float) -> float:
    """When the last of `works` (seconds each alone) finishes, with the ranks sharing `slots` runners
    (cores over threads per rank): processor sharing, the shortest finishing first and freeing its share.

    Four ranks of 7.1, 12.9, 13.2 and 20.4 ms on 2 cores: all four at half a core until 7.1 ms of work is
    done (14.2 ms), three at 2/3 of a core for 5.8 ms more (8.7 ms), then two and one at a core each
    (0.3 + 7.2 ms): 30.4 ms, not the sum over the cores (26.8 ms) nor the largest (20.4 ms).
    """
    left = sorted(w for w in works if w > 0.0)
    t = done = 0.0
    for i, w in enumerate(left):
        rate = min(1.0, slots / (len(left) - i))  # each runnable rank's share of a runner
        t += (w - done) / rate
        done = w
    return t


@dataclass(frozen=True)
class Epoch:
    """An epoch priced phase by phase: its seconds, and what they are made of."""

    seconds: float
    compute_s: float  # the phases' makespans with every rank alone on its threads (no sharing), at its host's speed
    sharing_s: float  # what sharing the hosts' cores adds to that
    wire_s: float  # the meetings' time beyond what the ranks compute meanwhile


def epoch(ranks: Sequence[Sequence[Phase]], hosts: Sequence[Sequence[int]], slots: float) -> Epoch:
    """The epoch of ranks whose phases line up (phase j of every rank ends in meeting j): per phase, the
    slowest host's makespan of the work before the meeting, then the meeting, which lasts the longest
    rank's wire time or the slowest host's makespan of what ranks compute while it travels, whichever is
    longer. `hosts`: the ranks of each host (they share `slots`). A host of less than a runner (a CPU quota
    of 0.22 core) runs even one rank at that fraction: its own speed, not sharing."""
    speed = min(1.0, slots)
    total = alone = wire = 0.0
    for j in range(len(ranks[0])):
        phase = [r[j] for r in ranks]
        work = max(shared_makespan([phase[k].work_s for k in h], slots) for h in hosts)
        overlap = max(shared_makespan([phase[k].overlap_s for k in h], slots) for h in hosts)
        meet = max(p.wire_s for p in phase)
        total += work + max(meet, overlap)
        alone += (max(p.work_s for p in phase) + max(p.overlap_s for p in phase)) / speed
        wire += max(0.0, meet - overlap)
    return Epoch(total, alone, total - alone - wire, wire)
