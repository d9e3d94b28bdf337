"""Optimisers and learning-rate schedules by name, as the launcher's flags give them."""
from __future__ import annotations

import inspect
import sys

import torch


def make_optimizer(name: str, model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    if name == "adam":
        return Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return SGD(model.parameters(), lr=lr, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer '{name}' (choose adam or sgd)")


SCHEDULES = ("none", "cosine", "step")


def make_schedule(name: str, opt: torch.optim.Optimizer, epochs: int, step: int = 50, gamma: float = 0.5):
    """Per-epoch learning-rate schedule: cosine to zero over `epochs`, or x gamma every `step` epochs."""
    if name == "none":
        return None
    if name == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(epochs, 1))
    if name == "step":
        return torch.optim.lr_scheduler.StepLR(opt, step_size=step, gamma=gamma)
    raise ValueError(f"unknown learning-rate schedule '{name}' (choose from {', '.join(SCHEDULES)})")


# torch.optim imports torch._dynamo (about 70 MB of every rank's unique memory, and a second) on an optimizer's
# first use, although dynamo matters only while it traces, and it can only trace once imported. The optimizers
# here are torch's own, with that import deferred until something else has loaded dynamo.


def _dynamo_free(base: type) -> type:
    """torch's optimizer `base`, whose `step` skips `torch._dynamo.graph_break()` (and so the import) while
    torch._dynamo is not loaded; it is torch's step otherwise, and for differentiable optimizers."""
    defer_dynamo_import(base)
    try:
        from torch.optim.optimizer import _use_grad_for_differentiable
    except ImportError:  # a torch without it: plain torch, dynamo and all
        return base
    raw = inspect.unwrap(base.step)
    traced = _use_grad_for_differentiable(raw)

    def step(self, closure=None):
        if "torch._dynamo" in sys.modules or self.defaults.get("differentiable"):
            return traced(self, closure)
        with torch.no_grad():
            return raw(self, closure)

    return type(base.__name__, (base,), {"step": step, "__module__": __name__, "__doc__": base.__doc__})


def defer_dynamo_import(cls: type) -> None:
    """Keep torch.optim from importing torch._dynamo (about 70 MB per rank, and a second) when nothing compiles.

    Optimizer methods such as `add_param_group` and `zero_grad` are wrapped in
    `torch._disable_dynamo`, which imports torch._dynamo on the first call to
    make the method untraceable, and caches the result on the method as
    `__dynamo_disable`. Untraceable matters only while dynamo traces, and
    dynamo can only trace once imported. So the cache is seeded with a stand-in
    that calls the method itself while torch._dynamo is not loaded, and hands
    over to the real disabled method, caching it, from the first call after
    something else has imported it. (Should torch rename the cache, the seed is
    ignored and torch imports dynamo as before.)
    """
    probe = torch._disable_dynamo(lambda: None)  # the wrapper's code object, without importing anything
    for klass in cls.__mro__:
        for method in vars(klass).values():
            fn = getattr(method, "__wrapped__", None)
            if getattr(method, "__code__", None) is probe.__code__ and fn is not None \
                    and getattr(fn, "__dynamo_disable", None) is None:
                setattr(fn, "__dynamo_disable", _until_dynamo(fn))


def _until_dynamo(fn):
    def call(*args, **kwargs):
        if "torch._dynamo" not in sys.modules:
            return fn(*args, **kwargs)
        disabled = torch._dynamo.disable(fn, True, wrapping=False)
        setattr(fn, "__dynamo_disable", disabled)
        return disabled(*args, **kwargs)

    return call


Adam = _dynamo_free(torch.optim.Adam)
SGD = _dynamo_free(torch.optim.SGD)
