"""Dropout whose mask comes from a counter hash on the CPU: same distribution, a tenth of the cost.

torch's CPU dropout draws each Bernoulli with its own generator call, which
made it the largest single cost of a full-graph training step here. The mask
key, and F.dropout's mask where that runs instead (CUDA, no numba, or
env GNN_DIST_DROPOUT=torch, `gnn_dist.runtime.tuning`), come from the epoch's
dropout stream (`gnn_dist.runtime.streams`: per seed, epoch and rank, apart
from the codecs' dither), so a run, and a resumed run, repeat their masks
whatever the messages' codec.

The input features are dropped differently (`input_dropout`): their mask is a
function of (epoch key, global node id, column), so a rank can drop its own
copy of a halo row exactly as the row's owner drops it. The halo of the input
then needs fetching only once (`HaloExchange.static_halo`), and a distributed
run draws the very masks a single process does. On CUDA a Triton kernel draws them
(`runtime/triton_kernels.py`, where triton is installed): the CPU's masks, in one pass.
"""
from __future__ import annotations

import contextlib
import contextvars

import numpy as np
import torch
import torch.nn.functional as F

from gnn_dist.runtime import kernels, streams, tuning


class HashDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, relu: bool = False) -> torch.Tensor:
        flat = x.detach().contiguous().view(-1)
        out = torch.empty_like(flat)
        mask = torch.empty(flat.shape, dtype=torch.uint8)
        key = streams.dropout_key()
        scale = 1.0 / (1.0 - p)
        if flat.shape[0] >= tuning.NUMBA_MIN_ELEMENTS:
            kernels.in_ranges(kernels.load().dropout_into, flat.shape[0], flat.numpy(), out.numpy(), mask.numpy(),
                              _drop_below(p), scale, key, relu)
        else:  # the kernel's very mask and products, without loading numba for a small tensor
            keep = hash32(key, torch.arange(flat.shape[0])) >= _drop_below(p)
            out = (torch.relu(flat) if relu else flat) * _factor(keep, scale)
            mask = (keep & ~(flat <= 0) if relu else keep).to(torch.uint8)
        ctx.save_for_backward(mask)
        ctx.scale = scale
        return out.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (mask,) = ctx.saved_tensors
        flat = grad.contiguous().view(-1)
        if flat.dtype != torch.float32:
            return flat.mul(mask).mul_(ctx.scale).view_as(grad), None, None
        if flat.shape[0] < tuning.NUMBA_MIN_ELEMENTS:
            return (flat * _factor(mask, ctx.scale)).view_as(grad), None, None
        out = torch.empty_like(flat)
        kernels.in_ranges(kernels.load().dropout_grad_into, flat.shape[0], flat.numpy(), mask.numpy(), ctx.scale,
                          out.numpy())
        return out.view_as(grad), None, None


def _factor(mask: torch.Tensor, scale: float) -> torch.Tensor:
    """float32(scale) where the mask keeps, else 0: the numba kernels' per-element factor, so products match."""
    return mask.to(torch.float32) * np.float32(scale)


def _drop_below(p: float) -> int:
    """Hashes below this are dropped: 32-bit hashes, so the keep rate is 1 - p to within 2^-32."""
    return min(int(p * 2**32), 2**32 - 1)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """F.dropout's contract: zero each element with probability p, scale the rest by 1 / (1 - p)."""
    if not training or p == 0.0:
        return x
    if not 0.0 <= p < 1.0 or not _hashed(x):  # (torch's own error for p outside [0, 1], and p == 1)
        with streams.dropout_stream(x.device):
            return F.dropout(x, p, training)
    return HashDropout.apply(x, p)


def relu_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """dropout(relu(x)) with the same mask, in one pass each way: no ReLU output kept for backward, where
    one product by the mask (which also clears x <= 0) serves both."""
    if not training or p == 0.0 or not 0.0 <= p < 1.0 or not _hashed(x):
        return dropout(F.relu(x), p, training)
    return HashDropout.apply(x, p, True)


def _hashed(x: torch.Tensor) -> bool:
    """Dropout of x draws the counter-hash mask (else torch's F.dropout)."""
    return tuning.ENV.dropout_backend != "torch" and x.device.type == "cpu" and x.dtype == torch.float32 and kernels.available()


def _keyed_on_gpu(x: torch.Tensor) -> bool:
    """Keyed dropout of x runs the Triton kernel (CUDA float32, no autograd, triton installed)?"""
    return (tuning.ENV.dropout_backend != "torch" and x.is_cuda and x.dtype == torch.float32 and not x.requires_grad
            and kernels.triton_available())


_M32 = 0xFFFFFFFF


def _mul_low32(a: torch.Tensor, c: int) -> torch.Tensor:
    """(a * c) mod 2^32 for a in [0, 2^32), in int64 without overflow: split a into 16-bit halves."""
    return ((a & 0xFFFF) * c + (((a >> 16) * c) & 0xFFFF) * 65536) & _M32


def hash32(key: int, idx: torch.Tensor) -> torch.Tensor:
    """`cpu_kernels._hash32` in torch (any device), bit for bit: int64 in [0, 2^32)."""
    h = (_mul_low32(idx & _M32, 0x9E3779B1) + (key & _M32)) & _M32
    h = h ^ (h >> 16)
    h = _mul_low32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul_low32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def keyed_dropout(x: torch.Tensor, ids: torch.Tensor, p: float, key: int) -> torch.Tensor:
    """Dropout of rows that belong to nodes `ids` (global): element (i, j) is kept iff hash(key, ids[i] * w + j)
    >= p 2^32, so copies of a node's row held by different ranks lose the same elements."""
    if p == 0.0 or x.shape[0] == 0:
        return x
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    key %= 2**64
    scale = 1.0 / (1.0 - p)
    x2 = x.reshape(x.shape[0], -1)
    if _keyed_on_gpu(x):  # one Triton pass, numba's very mask and products
        return kernels.triton().keyed_dropout(x2, ids.to(x.device, torch.int64), _drop_below(p), scale, key).view_as(x)
    if _hashed(x) and not x.requires_grad and x2.numel() >= tuning.NUMBA_MIN_ELEMENTS:
        out = torch.empty_like(x2)
        kernels.in_ranges(kernels.load().keyed_dropout_rows, x2.shape[0], x2.contiguous().numpy(), out.numpy(),
                          ids.numpy(), _drop_below(p), scale, np.uint64(key))  # one signature for keys above 2^63
        return out.view_as(x)
    w = x2.shape[1]
    idx = ids.to(x.device, torch.int64).view(-1, 1) * w + torch.arange(w, device=x.device)
    keep = hash32(key, idx) >= _drop_below(p)
    return torch.where(keep, x2 * scale, torch.zeros((), dtype=x.dtype, device=x.device)).view_as(x)


_INPUT_KEY: contextvars.ContextVar[int | None] = contextvars.ContextVar("input_dropout_key", default=None)


@contextlib.contextmanager
def input_dropout_key(key: int | None):
    """The input-dropout key of one training step, the same on every rank (the training loop sets one per epoch).

    It belongs to the step, not to the graph: outside the `with`, input dropout is plain dropout again.
    """
    token = _INPUT_KEY.set(key)
    try:
        yield
    finally:
        _INPUT_KEY.reset(token)


def input_step_key() -> int | None:
    """The current step's keyed-dropout key (`input_dropout_key`), None outside a training step's `with`."""
    return _INPUT_KEY.get()


def input_dropout(x: torch.Tensor, graph, p: float, training: bool) -> torch.Tensor:
    """Dropout of the graph's input features `graph.x`, and the halo they imply handed to the exchange.

    Within a step's key (`input_dropout_key`), inner rows and the once-fetched halo copy
    are dropped alike by global node id, and the first layer reads the halo
    from here instead of the wire. Anything else (another tensor, no key, an
    exchange without the input cache) is plain `dropout`.
    """
    key = _INPUT_KEY.get()
    drops = training and p > 0.0
    if not graph.is_input(x) or x.requires_grad or (drops and key is None):
        return dropout(x, p, training)
    ids = graph.global_id_tensor()
    n = graph.num_inner
    out = keyed_dropout(x, ids[:n], p, key) if drops else x
    ex = graph.exchange
    if ex is not None and ex.config.input_cache:
        def halo(exchange) -> torch.Tensor:  # only if a layer exchanges `out` itself (GCN transforms Cora's X first)
            rows = exchange.static_halo(x)  # (the exchange comes as an argument: no reference cycle through it)
            return keyed_dropout(rows, ids[n:], p, key) if drops else rows

        ex.provide(out, halo)
    return out
