"""Atomic checkpoints: a crash mid-write leaves the previous checkpoint intact."""
from __future__ import annotations

import os
from pathlib import Path

import torch


def save_atomic(obj: dict, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load(path: str | Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)
