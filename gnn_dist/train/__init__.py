"""Training: the loops that turn a part and a model into trained weights.

trainer (node classification), link (link prediction), dynamic (snapshot sequences), checkpoint (atomic saves),
optim (optimisers and learning-rate schedules), tblog (TensorBoard scalars), dynamic_reference (the
single-process PyG run that dynamic results are checked against).
"""
