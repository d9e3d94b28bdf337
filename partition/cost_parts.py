"""The default partition: the one whose predicted slowest rank is fastest (partition.costmodel).

Balancing node counts leaves one rank of a power-law graph with several times the mean work; balancing
work alone lets node counts (memory) drift. The partitioners take one weight per node (pymetis, Mt-KaHyPar
and KaHIP read a two-column array as its first n entries), so the weight is one column that mixes both:
w = (cost / mean cost + 1) / 2, which keeps every part's node count under 2x the mean. Then `rebalance`'s
swaps, which keep node counts, even out the cost itself. Each step is kept only when the predicted
slowest rank falls, and the node-balanced partition of before is a candidate too, so the default never
predicts slower than it (and replaces it only when predicted 2% faster: less is within the
model's error). A method may add node-balanced candidates of its own (`others`: METIS's volume objective,
which evens the busiest link's rows on power-law graphs where the cut leaves one rank receiving most).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from partition.costmodel import Prediction, Workload, node_seconds, predict
from partition.errors import DataError
from partition.graph import Graph
from partition.machine import Machine
from partition.methods import BALANCE_TOLERANCE, undirected_adjacency
from partition.part_counts import part_counts
from partition.rebalance import rebalance
from partition.side_by_side import run_all

WEIGHT_SCALE = 1000  # integer node weights: the partitioners take int64
NODE_BOUND = 2.0  # a cost-weighted part holds at most this many times the mean node count (the half-count weight)
MARGIN = 0.98  # another candidate replaces the node-balanced one only when predicted at least 2% faster


@dataclass
class Choice:
    parts: np.ndarray
    name: str  # which candidate won
    prediction: Prediction
    considered: dict  # candidate name -> predicted epoch seconds


def combined_weight(cost: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """One integer column: `alpha` of the node's cost relative to the mean, the rest a node count (the
    default's is half and half; scripts/bench_default_partition.py tries other shares)."""
    rel = cost / max(float(cost.mean()), 1e-30)
    return np.maximum(np.rint(WEIGHT_SCALE * (alpha * rel + (1.0 - alpha))), 1).astype(np.int64)


def choose(graph: Graph, num_parts: int, run: Callable[[np.ndarray | None], np.ndarray], work: Workload,
           machine: Machine, others: Mapping[str, Callable[[], np.ndarray]] | None = None,
           workers: int = 1) -> Choice:
    """`run(weights)` partitions with one weight column (None: node counts); returns the candidate whose
    predicted epoch is least: node-balanced, cost-weighted, each of `others` (name -> a partition), and each
    swapped for even cost. The candidates are made side by side on up to `workers` processes
    (partition.side_by_side: the same partitions, sooner)."""
    src, dst = graph.edge_index()

    def priced(parts: np.ndarray) -> Prediction:
        return predict(part_counts(src, dst, parts, num_parts), work, machine)

    cost = node_seconds(graph.in_degree(), work, machine)
    adj = undirected_adjacency(graph)  # built once, before the workers fork: they share it

    def considered(name: str, make: Callable[[], np.ndarray]) -> Callable[[], dict]:
        """A job: the candidate `make` returns, priced, then its cost swaps (which keep node counts) if they
        lower the predicted max. A candidate that leaves a part empty raises DataError (left out)."""
        def job() -> dict:
            parts = np.asarray(make(), dtype=np.int32)
            if name != "node counts" and np.bincount(parts, minlength=num_parts).min() == 0:
                raise DataError(f"the {name} candidate leaves a part empty")
            out = {name: (parts, priced(parts))}
            swapped = rebalance(adj, parts, cost[:, None], num_parts, tol=BALANCE_TOLERANCE).astype(np.int32)
            swapped_pred = priced(swapped)
            if swapped_pred.epoch_s < out[name][1].epoch_s:
                out[f"{name} + swaps"] = (swapped, swapped_pred)
            return out
        return job

    weights = combined_weight(cost)
    makers = {"node counts": lambda: run(None), "cost-weighted": lambda: run(weights), **(others or {})}
    made = run_all({name: considered(name, make) for name, make in makers.items()}, workers)
    if isinstance(made["node counts"], DataError):  # the partition of before: its errors stand
        raise made["node counts"]
    candidates: dict = {}
    for found in made.values():  # a candidate that cannot be made is left out, not the default's failure
        if not isinstance(found, DataError):
            candidates.update(found)
    best = min(candidates, key=lambda k: candidates[k][1].epoch_s)
    name = best if candidates[best][1].epoch_s < MARGIN * candidates["node counts"][1].epoch_s else "node counts"
    parts, pred = candidates[name]
    return Choice(parts, name, pred, {k: v[1].epoch_s for k, v in candidates.items()})
