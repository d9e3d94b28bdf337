"""Every model the launcher can build, by name or by `module:function`: train, predict and export read this.

A built-in name maps to the kind of graph it runs on and a builder; a user's
model is `build(num_features, num_classes, config)` in an importable module
(`mypkg.models:build`, the working directory on the path) or a file
(`path/to/model.py:build`), returning a module of gnn-dist layers (or of PyG's
own, wrapped by `gd.nn.Distributed`) that is called as `model(x, graph)`.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from torch import nn

from gnn_dist.nn.dynamic import DYNAMIC_MODELS, build_dynamic_model
from gnn_dist.nn.models import MODELS, build_model
from gnn_dist.nn.typed import TYPED_MODELS, TypedGNN
from partition.errors import UsageError


@dataclass(frozen=True)
class ModelConfig:
    """What a model builder is told (from the command line): sizes and the usual knobs.

    Typed graphs add `feature_dims` (per node type) and `edge_types` ("src:rel:dst").
    """

    hidden: int = 16
    layers: int = 2
    dropout: float = 0.5
    heads: int = 8  # attention heads of hidden GAT layers
    num_bases: int | None = None  # R-GCN basis matrices (None: one weight per relation)
    task: str = "node"  # node | link (link: num_classes is the embedding width)
    feature_dims: tuple = ()
    edge_types: tuple = ()
    extra: dict = field(default_factory=dict)  # anything else a builder wants, keyed by name


Builder = Callable[[int, int, ModelConfig], nn.Module]


@dataclass(frozen=True)
class Entry:
    graph: str  # "static", "typed" or "dynamic": the partitions the model runs on
    build: Builder


def _static(kind: str) -> Builder:
    return lambda f, c, cfg: build_model(kind, f, cfg.hidden, c, cfg.layers, cfg.dropout, cfg.heads)


def _typed(kind: str) -> Builder:
    return lambda f, c, cfg: TypedGNN(kind, list(cfg.feature_dims), cfg.hidden, c, list(cfg.edge_types),
                                       cfg.layers, cfg.num_bases, cfg.dropout)


def _dynamic(kind: str) -> Builder:
    return lambda f, c, cfg: build_dynamic_model(kind, f, cfg.hidden, c, cfg.layers)


REGISTRY: dict[str, Entry] = {
    **{k: Entry("static", _static(k)) for k in MODELS},
    **{k: Entry("dynamic", _dynamic(k)) for k in DYNAMIC_MODELS},
    **{k: Entry("typed", _typed(k)) for k in TYPED_MODELS},
}


def names(graph: str) -> tuple[str, ...]:
    """Built-in model names for one kind of graph."""
    return tuple(k for k, e in REGISTRY.items() if e.graph == graph)


def is_user_model(spec: str) -> bool:
    return spec not in REGISTRY and ":" in spec


def describe() -> str:
    return (f"static: {' | '.join(names('static'))}; dynamic: {' | '.join(names('dynamic'))}; typed: "
            f"{' | '.join(names('typed'))}; or your own: MODULE:FUNCTION or FILE.py:FUNCTION")


def _on_path(folder: str) -> None:
    if folder not in sys.path:
        sys.path.insert(0, folder)


def _load_user_builder(spec: str) -> Builder:
    target, _, func = spec.rpartition(":")
    _on_path(os.getcwd())  # the working directory, as docs/layers.md says: a console script's path starts elsewhere
    if not target or not func:
        raise UsageError(f"--model {spec}: expected MODULE:FUNCTION or FILE.py:FUNCTION")
    try:
        if target.endswith(".py"):
            path = Path(target).resolve()
            if not path.is_file():
                raise UsageError(f"--model {spec}: file {target} does not exist")
            name = f"gnn_dist_user_{abs(hash(str(path)))}"
            module = sys.modules.get(name)
            if module is None:  # its folder first on the path, as `python FILE.py` has it: its neighbours import
                _on_path(str(path.parent))
                module_spec = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(module_spec)
                sys.modules[name] = module
                module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except UsageError:
        raise
    except Exception as e:  # an import error, or the module raising while it loads
        raise UsageError(f"--model {spec}: cannot import {target} ({type(e).__name__}: {e})") from None
    builder = getattr(module, func, None)
    if not callable(builder):
        raise UsageError(f"--model {spec}: {target} has no function '{func}'")
    return builder


def graph_kind(spec: str) -> str | None:
    """The kind of graph a built-in runs on; None for a user's model (static or typed)."""
    return REGISTRY[spec].graph if spec in REGISTRY else None


def builder_of(spec: str) -> Builder:
    """The builder `spec` names; one line if it names none (call before any rank starts talking)."""
    if spec in REGISTRY:
        return REGISTRY[spec].build
    if not is_user_model(spec):
        raise UsageError(f"unknown model '{spec}' (choose from {describe()})")
    return _load_user_builder(spec)


def check(spec: str) -> None:
    """One line if `spec` names no model."""
    builder_of(spec)


def build(spec: str, num_features: int, num_classes: int, config: ModelConfig) -> nn.Module:
    """The model `spec` names, built for these sizes."""
    model = builder_of(spec)(num_features, num_classes, config)
    if not isinstance(model, nn.Module):
        raise UsageError(f"--model {spec}: {spec.rpartition(':')[2]}() returned {type(model).__name__}, "
                         f"not a torch.nn.Module")
    return model


def accepts_embed(model: nn.Module) -> bool:
    """Can `model(x, graph, embed=True)` give the input of its last layer (predict --output embeddings)?"""
    from gnn_dist.nn.embedding import Embedded

    if isinstance(model, Embedded):
        return accepts_embed(model.model)
    return "embed" in inspect.signature(model.forward).parameters
