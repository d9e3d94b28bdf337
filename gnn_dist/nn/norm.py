"""Batch normalisation over the whole graph: statistics summed over every rank's inner rows.

A plain `torch.nn.BatchNorm1d` on a rank normalises by that rank's rows only,
so P ranks compute P different functions; this one computes what a single
process computes on the whole graph (two all-reduces per training forward:
the mean, then the variance about it, for the same rounding as one pass
over all rows). Its gradient flows through the all-reduce, so each rank's
rows get the gradient of the global loss.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from gnn_dist.runtime import staging


class _AllSum(torch.autograd.Function):
    """Sum over ranks; backward sums the gradient too (every rank's loss depends on the sum)."""

    @staticmethod
    def forward(ctx, t: torch.Tensor) -> torch.Tensor:
        return staging.all_reduce(t.clone())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return staging.all_reduce(grad.clone())


def _global_sum(t: torch.Tensor) -> torch.Tensor:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return _AllSum.apply(t)
    return t


class BatchNorm(nn.BatchNorm1d):
    """`torch.nn.BatchNorm1d` whose batch is every rank's inner rows (PyG's BatchNorm on the whole graph).

    Same parameters, buffers and state_dict keys as BatchNorm1d, so weights move both ways.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training or not self.track_running_stats):
            return super().forward(x)
        count = _global_sum(torch.tensor([x.shape[0]], dtype=torch.int64, device=x.device)).to(x.dtype)  # int64 sum
        mean = _global_sum(x.sum(0)) / count
        var = _global_sum((x - mean).pow(2).sum(0)) / count
        if self.training and self.track_running_stats:
            with torch.no_grad():
                m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked + 1)
                self.num_batches_tracked += 1
                unbiased = var * (count / (count - 1).clamp(min=1))
                self.running_mean.lerp_(mean, m)
                self.running_var.lerp_(unbiased, m)
        out = (x - mean) / torch.sqrt(var + self.eps)
        if self.affine:
            out = out * self.weight + self.bias
        return out


def per_rank_batch_norms(model: nn.Module) -> list[str]:
    """Names of torch BatchNorm modules in `model` that would normalise per rank (not `BatchNorm`)."""
    return [name for name, m in model.named_modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and not isinstance(m, BatchNorm)]


