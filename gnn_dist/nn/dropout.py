"""Dropout whose mask comes from a counter hash on the CPU: same distribution, a tenth of the cost.

torch's CPU dropout draws each Bernoulli with its own generator call, which
made it the largest single cost of a full-graph training step here. The mask
key is drawn from torch's default generator, so a seeded run repeats its
masks (the trainer seeds per epoch and rank). On CUDA, or without numba, or
with `BACKEND = "torch"` (env GNN_DIST_DROPOUT=torch), this is F.dropout.
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from gnn_dist import fused

BACKEND = os.environ.get("GNN_DIST_DROPOUT", "auto")  # auto | torch


class HashDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        flat = x.detach().contiguous().view(-1)
        out = torch.empty_like(flat)
        mask = torch.empty(flat.shape, dtype=torch.uint8)
        key = int(torch.randint(0, 2**62, (1,)))
        scale = 1.0 / (1.0 - p)
        fused.kernels().dropout_into(flat.numpy(), out.numpy(), mask.numpy(), min(int(p * 2**32), 2**32 - 1),
                                     scale, key)
        ctx.save_for_backward(mask)
        ctx.scale = scale
        return out.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (mask,) = ctx.saved_tensors
        return grad.contiguous().view(-1).mul(mask).mul_(ctx.scale).view_as(grad), None


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """F.dropout's contract: zero each element with probability p, scale the rest by 1 / (1 - p)."""
    if not training or p == 0.0:
        return x
    if not 0.0 <= p < 1.0:
        return F.dropout(x, p, training)  # torch's own error for p outside [0, 1], and p == 1
    if BACKEND == "torch" or x.device.type != "cpu" or x.dtype != torch.float32 or not fused.available():
        return F.dropout(x, p, training)
    return HashDropout.apply(x, p)
