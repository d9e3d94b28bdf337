"""Optimisers and learning-rate schedules by name, as the launcher's flags give them."""
from __future__ import annotations

import torch


def make_optimizer(name: str, model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, weight_decay=weight_decay)
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
