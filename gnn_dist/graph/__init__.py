"""One rank's part at run time: topology, halo plans and tensors.

local (LocalGraph, the object layers see), load (a partition directory -> LocalGraph and its exchange),
typed (typed parts: per-type features and relation views), relagg (relation-aggregation-first exchange),
dynamic (one LocalGraph per snapshot, from stored differences).
"""
