"""A saved model (`train --save-model`): the model's name and shape, and its weights; what `predict` rebuilds.

The file records the model, not the command line: renaming a flag does not
break old files, and nothing but data is read back (`gnn_dist.train.checkpoint.read`).
A user's model is code, and a file could name any code: predict imports
a model only when the command line names it again (`--model SPEC`), and
only if that is the name the file was saved with.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from partition.errors import UsageError

# the model's spec: field -> the types its value may have (a file with anything else is refused)
FIELDS = {"name": (str,), "hidden": (int,), "layers": (int,), "heads": (int,), "dropout": (float, int),
          "num_bases": (int,), "task": (str,), "embedding_dim": (int, type(None)), "normalize_features": (bool,)}


def spec(args: argparse.Namespace) -> dict:
    """What rebuilds the model a run trained: `--model` and the flags that shape it (plain values)."""
    values = {"name": args.model, **{k: getattr(args, k) for k in FIELDS if k != "name"}}
    return {k: (float(v) if k == "dropout" else v) for k, v in values.items()}


def write(path: str | Path, args: argparse.Namespace, state: dict) -> None:
    """The trained weights (complete, on rank 0) and the spec, atomically."""
    from gnn_dist.train.checkpoint import MODEL, save_atomic, stamped

    save_atomic(stamped(MODEL, model=spec(args), state={k: v.cpu() for k, v in state.items()}), path)


def read(path: str | Path, named: str | None) -> tuple[argparse.Namespace, dict]:
    """(the flags that rebuild the model, its weights); `named`: predict's --model, None if not given.

    One line if the file is not a model file, if --model differs from the file's model, or if the file's
    model is a user's and --model does not name it (nothing is imported before that check).
    """
    import torch

    from gnn_dist.nn.registry import REGISTRY, check
    from gnn_dist.train import checkpoint

    saved = checkpoint.read(path, checkpoint.MODEL)
    model, state = saved.get("model"), saved.get("state")
    bad = [k for k, types in FIELDS.items() if not isinstance(model, dict) or type(model.get(k)) not in types]
    if bad or not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
        raise UsageError(f"{path} is not a complete gnn-dist model file ({'field ' + bad[0] if bad else 'weights'})")
    name = model["name"]
    if named is not None and named != name:
        raise UsageError(f"--model {named} does not match the model {path} was saved with ({name})")
    if named is None and name not in REGISTRY:
        raise UsageError(f"{path} was saved with your own model {name}; gnn-dist imports no code that a file names: "
                         f"pass --model {name} (gd.load_model: model={name!r}) to run it")
    check(name)  # a user's model, named on the command line: importable from here?
    rebuild = {k: v for k, v in model.items() if k in FIELDS and k != "name"}
    return argparse.Namespace(model=name, seed=0, **rebuild), state


def rebuild(flags: argparse.Namespace, weights: dict, graph, ctx, source: str):
    """The model `read` described, built for this rank's part, with the saved weights and this rank's own rows
    of any learnable node table; one line (naming `source`) if they do not fit this part."""
    from gnn_dist.cli.train import build_user_or_builtin
    from gnn_dist.train.checkpoint import load_model_state

    width = flags.hidden if getattr(flags, "task", "node") == "link" else graph.num_classes  # link: embeddings
    model = build_user_or_builtin(flags, ctx, graph, width)
    load_model_state(model, weights, source)
    return model.to(ctx.device)  # where the part is


def load_model(path: str | Path, part, ctx, model: str | None = None):
    """A `gnn-dist train --save-model` file as a model for this rank's `part` (gd.load_model).

    Why not torch.load and load_state_dict: the file stores every learnable node row (graphs without
    features), and each rank must take only the rows of the nodes it owns; the model is rebuilt from the
    file's own spec (name, hidden, layers, heads, ...). Nothing but data is read: a model of your own is
    rebuilt only if `model` names it again ("mymodels:build" or "FILE.py:build"), as `predict --model` does.
    """
    flags, weights = read(path, model)
    return rebuild(flags, weights, part, ctx, f"{path} (on this partition)")


def save_model(path: str | Path, model, ctx, name: str | None = None, **flags) -> None:
    """Write `model` as `gnn-dist train --save-model` does (gd.save_model), for predict and gd.load_model.

    Every rank calls it: learnable node rows are gathered from their owners to rank 0, which writes the
    file atomically, and every rank returns once it is written (so a rank may load it next, where ranks
    share the folder). A built-in model (`gd.nn.build_model`) records its own name, hidden width, layers,
    heads and dropout; a flag given that contradicts them is refused in one line, as a file that could never
    load. A model of your own is named as `--model` would name it (`name="mymodels:build"`), with the
    flags its builder reads (`hidden`, `layers`, `heads`, `dropout`, `num_bases`, `task`, `embedding_dim`,
    `normalize_features`; train's defaults where not given).
    """
    from gnn_dist.runtime.collectives import count_sum
    from gnn_dist.train.checkpoint import model_state

    spec = {"hidden": 16, "layers": 2, "heads": 8, "dropout": 0.5, "num_bases": 2, "task": "node",
            "embedding_dim": None, "normalize_features": False}
    unknown = sorted(set(flags) - set(spec))
    if unknown:
        raise UsageError(f"save_model: unknown model flag '{unknown[0]}' (flags: {', '.join(spec)})")
    own = _builtin_spec(model)
    for key, value in ({"name": name, **flags}.items() if own else ()):
        if value is not None and key in own and value != own[key]:  # task, num_bases...: the builder's, not its
            raise UsageError(f"save_model: the model is a built-in {own['name']} with {key} {own[key]}, not "
                             f"{value}: drop the flag (a built-in model records its own)")
    if own is None and name is None:
        raise UsageError("save_model: a model of your own needs name='MODULE:FUNCTION' (as --model names it)")
    spec.update(flags, **(own or {"name": name}))
    state = model_state(model, ctx)  # a collective: every rank
    if ctx.is_main:
        write(path, argparse.Namespace(model=spec.pop("name"), **spec), state)
    count_sum(1, ctx)  # the ranks meet: the file is there


def _builtin_spec(model) -> dict | None:
    """The flags of a model `gd.nn.build_model` made (inside learnable rows' wrapper too); None for others."""
    from gnn_dist.nn.models import GNN

    inner = getattr(model, "model", model)
    if type(inner) is not GNN:
        return None
    return {"name": inner.kind, "hidden": inner.hidden, "layers": len(inner.convs), "heads": inner.heads,
            "dropout": float(inner.dropout)}
