"""Atomic checkpoints and model files that hold data only, and model and optimiser state with rank-local
tables whole.

A crash mid-write leaves the previous checkpoint intact. A rank-local
parameter (learnable node rows, `gnn_dist.nn.embedding`) is gathered into its
whole table, in global row order, before rank 0 writes; on loading, each rank
takes its own rows back. So a checkpoint or saved model does not depend on
how many ranks wrote it.

Files hold tensors and plain Python values only, under a schema of their own
(`{"format": ..., "version": 2, ...}`, not the command line's flags), and are
read with `torch.load(weights_only=True)`: a pickle that names a function or
class (os.system, a module of its own) is refused before anything it names is
imported or called. Version 1 (gnn-dist before this schema: a pickle of the
flags) is named and refused, not guessed at.
"""
from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

from gnn_dist.runtime.collectives import gather_rows, is_rank_local
from gnn_dist.runtime.launch import DistContext
from partition.errors import GnnDistError, UsageError

MODEL, CHECKPOINT, BEST = "gnn-dist-model", "gnn-dist-checkpoint", "gnn-dist-best"  # the formats, by file
VERSION = 2
_WHAT = {MODEL: "model file (train --save-model)", CHECKPOINT: "checkpoint", BEST: "best-weights file"}
# the fields a resume reads, by type (a model file's own spec is checked by gnn_dist.cli.model_file)
_FIELDS = {CHECKPOINT: {"epoch": int, "seed": int, "world_size": int, "model": dict, "optimizer": dict,
                        "schedule": (dict, type(None)), "exchange": (list, type(None)), "best": (dict, type(None)),
                        "model_spec": (dict, type(None))}}


def stamped(fmt: str, **fields) -> dict:
    """A file's contents under its format and version."""
    return {"format": fmt, "version": VERSION, **fields}


def read(path: str | Path, fmt: str) -> dict:
    """A file written in format `fmt`, loaded as data only; one line (UsageError) for anything else."""
    what = _WHAT[fmt]
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except FileNotFoundError:
        raise UsageError(f"{what} {path} does not exist") from None
    except OSError as e:
        raise UsageError(f"{what} {path} cannot be read: {e.strerror or e}") from None
    if head[:4] != b"PK\x03\x04" and head[:1] != b"\x80":  # torch.save's zip, or an old torch's pickle
        raise UsageError(f"{path} is not a gnn-dist {what} (not a file torch.save writes)")
    try:
        with warnings.catch_warnings():  # torch's notes on pickle protocols would break the one line
            warnings.simplefilter("ignore")
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # UnpicklingError: something other than tensors and plain values; else not a torch file
        found = re.search(r"(?i)(GLOBAL [\w.]+|unsupported operand \S+|unsupported class \S+)", str(e))
        if found or "weights only" in str(e).lower():
            reason = found.group(1) if found else "an object other than tensors and plain values"
            raise UsageError(f"{path}: refused, and nothing in it was run: it holds {reason}, not only tensors "
                             f"and plain values as a gnn-dist {what} does (version {VERSION})") from None
        raise UsageError(f"{path} is not a gnn-dist {what} ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else 'unreadable'})") from None
    held = obj.get("format") if isinstance(obj, dict) else None
    if held is None and isinstance(obj, dict) and {"model", "args", "optimizer"} & set(obj):
        raise UsageError(f"{path} is a version-1 {what} (an older gnn-dist's, whose schema was the command line's "
                         f"flags); this gnn-dist reads version {VERSION}: train again to write one")
    if held != fmt:
        other = f" but a {_WHAT[held]}" if isinstance(held, str) and held in _WHAT else ""
        raise UsageError(f"{path} is not a gnn-dist {what}{other}")
    if obj.get("version") != VERSION:
        raise UsageError(f"{path} is a version-{obj.get('version')} {what}; this gnn-dist reads version {VERSION}")
    bad = next((k for k, kind in _FIELDS.get(fmt, {}).items() if not isinstance(obj.get(k), kind)), None)
    if bad is not None:  # an edited or foreign file: one line here, not a KeyError deep in a resume
        raise UsageError(f"{path} is not a complete gnn-dist {what} (field {bad})")
    return obj


def save_atomic(obj: dict, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk, an interrupt: the previous file stays, no half-written one is left
        tmp.unlink(missing_ok=True)
        raise


def _local(params) -> list[tuple[int, torch.nn.Parameter]]:
    return [(i, p) for i, p in enumerate(params) if is_rank_local(p)]


def model_state(model: torch.nn.Module, ctx: DistContext, state: dict | None = None) -> dict:
    """`model.state_dict()` (or `state`, one of the model's state dicts) with rank-local tables whole
    (complete on rank 0; every rank must call this)."""
    state = model.state_dict() if state is None else dict(state)  # (a fresh state_dict keeps its _metadata)
    for name, p in model.named_parameters():
        if is_rank_local(p):
            state[name] = gather_rows(state[name], p.rank_rows, p.num_rows, ctx)
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


def own_model_state(model: torch.nn.Module, state: dict) -> dict:
    """A state dict whose rank-local tables are whole, with this rank's own rows of them."""
    state = dict(state)
    for name, p in model.named_parameters():
        if is_rank_local(p) and name in state:
            state[name] = _own_rows(state[name], p)
    return state


# the model flags that shape the weights (dropout and feature normalisation do not)
SHAPING_FLAGS = ("name", "hidden", "layers", "heads", "num_bases", "task", "embedding_dim")


def spec_differences(saved: dict | None, now: dict | None, keys=None) -> str:
    """The model flags (of `keys`, default all) that differ between a checkpoint's run and this one, as the user
    typed them ("--hidden 16 there, 32 here"); empty if none differ or either run recorded none (older files)."""
    if not saved or not now:
        return ""
    flag = lambda k: "--model" if k == "name" else "--" + k.replace("_", "-")  # noqa: E731
    return ", ".join(f"{flag(k)} {saved.get(k)} there, {now.get(k)} here" for k in now
                     if (keys is None or k in keys) and saved.get(k) != now.get(k))


def load_model_state(model: torch.nn.Module, state: dict, source: str = "the saved state", saved_spec: dict | None = None,
                     spec: dict | None = None, say=None) -> None:
    """Load a state dict whose rank-local tables are whole: this rank takes its own rows.

    A state that does not fit (another model, other flags that shape it, another graph's widths) is
    the user's file or flags, not the code: one line (UsageError) naming `source`, the weight-shaping model
    flags that differ between `saved_spec` and `spec` (the file's and this run's), and torch's first
    mismatch. A state that fits although flags differ (dropout, say) is loaded, and `say` told which.
    """
    try:
        model.load_state_dict(own_model_state(model, state))
    except RuntimeError as e:  # torch's "Error(s) in loading state_dict for GNN:", then one line per mismatch
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        first = (lines[1:] or lines or ["?"])[0][:300]
        shaping = spec_differences(saved_spec, spec, SHAPING_FLAGS)
        why = f"it was trained with other model flags ({shaping}): {first}" if shaping else first
        raise UsageError(f"{source} does not fit this model: {why}") from None
    differences = spec_differences(saved_spec, spec)
    if differences and say is not None:
        say(f"{source} was trained with other model flags ({differences}); its weights fit and are used")


def load_optimizer_state(opt: torch.optim.Optimizer, state: dict, source: str = "the saved state") -> None:
    """Load an optimiser state saved by `optimizer_state`; one line if another optimiser saved it."""
    keys = {k for group in state.get("param_groups", []) for k in group if k != "params"}
    if keys != {k for group in opt.param_groups for k in group if k != "params"}:
        raise UsageError(f"{source} holds the state of another optimiser than this run's --optimizer "
                         f"{type(opt).__name__.lower()}")
    params = [p for group in opt.param_groups for p in group["params"]]
    state = {**state, "state": dict(state["state"])}
    for i, p in _local(params):
        if i in state["state"]:
            state["state"][i] = {k: _own_rows(v, p) for k, v in state["state"][i].items()}
    opt.load_state_dict(state)


def gather_objects(obj, ctx: DistContext) -> list | None:
    """Every rank's `obj`, in rank order, on rank 0 (None elsewhere)."""
    if ctx.world_size == 1:
        return [obj]
    out = [None] * ctx.world_size if ctx.is_main else None
    dist.gather_object(obj, out, dst=0)
    return out


def receive(path: Path | None, ctx: DistContext) -> tuple[dict, object]:
    """(the checkpoint at `path`, this rank's own exchange state in it) on every rank; ({}, None) if absent.

    Rank 0 reads the file and broadcasts it without the per-rank exchange states, then hands each rank its
    own one (None where the checkpoint has none for this many ranks), so ranks need no shared filesystem. A
    file that is refused is refused on every rank, in the same one line.
    """
    state, per_rank = [{}], None
    if ctx.is_main and path is not None and path.exists():
        try:
            state[0] = read(path, CHECKPOINT)
        except GnnDistError as e:
            state[0] = {"error": str(e)}
        per_rank = state[0].pop("exchange", None)
        state[0]["exchange_here"] = per_rank is not None and state[0].get("world_size") == ctx.world_size
    if ctx.world_size > 1:
        dist.broadcast_object_list(state, 0)
    if "error" in state[0]:
        raise UsageError(state[0]["error"])
    mine = [per_rank[0] if per_rank and state[0]["exchange_here"] else None]
    if state[0].get("exchange_here") and ctx.world_size > 1:
        dist.scatter_object_list(mine, per_rank if ctx.is_main else None, src=0)
    return state[0], mine[0]
