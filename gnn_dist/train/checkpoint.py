"""Atomic checkpoints, and model and optimiser state with rank-local tables whole.

A crash mid-write leaves the previous checkpoint intact. A rank-local
parameter (learnable node rows, `gnn_dist.nn.embedding`) is gathered into its
whole table, in global row order, before rank 0 writes; on loading, each rank
takes its own rows back. So a checkpoint or saved model does not depend on
how many ranks wrote it.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from gnn_dist.runtime.collectives import gather_rows, is_rank_local
from gnn_dist.runtime.launch import DistContext


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


def _local(params) -> list[tuple[int, torch.nn.Parameter]]:
    return [(i, p) for i, p in enumerate(params) if is_rank_local(p)]


def model_state(model: torch.nn.Module, ctx: DistContext) -> dict:
    """`model.state_dict()` with rank-local tables whole (complete on rank 0; every rank must call this)."""
    state = model.state_dict()
    for name, p in model.named_parameters():
        if is_rank_local(p):
            state[name] = gather_rows(p.data, p.rank_rows, p.num_rows, ctx)
    return state


def optimizer_state(opt: torch.optim.Optimizer, ctx: DistContext) -> dict:
    """`opt.state_dict()` with the per-row state of rank-local parameters (Adam's moments) whole, as above."""
    state = opt.state_dict()
    params = [p for group in opt.param_groups for p in group["params"]]
    for i, p in _local(params):
        if i in state["state"]:
            per_param = state["state"][i] = dict(state["state"][i])  # a copy: the live state stays this rank's
            for key, value in per_param.items():
                if torch.is_tensor(value) and value.shape == p.shape:
                    per_param[key] = gather_rows(value, p.rank_rows, p.num_rows, ctx)
    return state


def _own_rows(value, p: torch.nn.Parameter):
    whole = torch.is_tensor(value) and value.dim() == p.dim() and value.shape[0] == p.num_rows
    return value[p.rank_rows] if whole and value.shape[1:] == p.shape[1:] else value


def load_model_state(model: torch.nn.Module, state: dict) -> None:
    """Load a state dict whose rank-local tables are whole: this rank takes its own rows."""
    state = dict(state)
    for name, p in model.named_parameters():
        if is_rank_local(p) and name in state:
            state[name] = _own_rows(state[name], p)
    model.load_state_dict(state)


def load_optimizer_state(opt: torch.optim.Optimizer, state: dict) -> None:
    params = [p for group in opt.param_groups for p in group["params"]]
    state = {**state, "state": dict(state["state"])}
    for i, p in _local(params):
        if i in state["state"]:
            state["state"][i] = {k: _own_rows(v, p) for k, v in state["state"][i].items()}
    opt.load_state_dict(state)
