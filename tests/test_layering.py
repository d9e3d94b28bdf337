"""The layering holds: runtime imports nothing above it, train nothing from the CLI, partition/ nothing of
gnn_dist (it is torch-free). Imports inside functions count too: they are how cycles hide."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# package -> the packages it must not import, with why
RULES = {
    "gnn_dist.runtime": ("gnn_dist.graph", "gnn_dist.nn", "gnn_dist.train", "gnn_dist.cli", "gnn_dist.data"),
    "gnn_dist.train": ("gnn_dist.cli",),
    "partition": ("gnn_dist",),
}


def imported(source: str, module: str) -> set[str]:
    """Every module `source` (the text of `module`) imports, at any depth, relative imports resolved."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")[:-node.level]
                base = ".".join(parent + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # `from gnn_dist import cli`
    return out


def violations(package: str, banned: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted((ROOT / package.replace(".", "/")).rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for name in sorted(imported(path.read_text(), module)):
            if any(name == b or name.startswith(b + ".") for b in banned):
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


@pytest.mark.parametrize("package", sorted(RULES))
def test_no_import_against_the_layering(package):
    assert violations(package, RULES[package]) == []


def test_the_check_sees_imports_inside_functions_and_relative_ones():
    src = "def f():\n    from gnn_dist.graph.local import spmm\nfrom ..cli import plots\nimport gnn_dist.nn.conv\n"
    names = imported(src, "gnn_dist.runtime.advice")
    assert {"gnn_dist.graph.local", "gnn_dist.cli.plots", "gnn_dist.nn.conv"} <= names
