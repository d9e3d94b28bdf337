"""docs/cli.md, written from the parser itself: every subcommand's flags, defaults and help, so the page
cannot drift from the code (`python -m gnn_dist.cli.reference > docs/cli.md`; tests/test_cli_reference.py
fails when the page is stale)."""
from __future__ import annotations

import argparse

HEADER = """# Command-line reference

Every `gnn-dist` subcommand and flag, generated from the argument parser
(`python -m gnn_dist.cli.reference > docs/cli.md`; a test checks the page is current). What the flags
do in context: [partitioning.md](partitioning.md), [training.md](training.md), [exchange.md](exchange.md),
[datasets.md](datasets.md). A flag that does not apply to the model, graph or exchange chosen is refused
in one line, not ignored.
"""


def _flag(action: argparse.Action) -> str:
    names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest.upper()}`"
    if action.nargs != 0 and action.option_strings:
        metavar = action.metavar or (("{" + ",".join(map(str, action.choices)) + "}") if action.choices
                                     else action.dest.upper())
        names += f" {metavar}" if isinstance(metavar, str) else ""
    return names


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if action.nargs == 0 or action.default is None or action.default is argparse.SUPPRESS or action.default == "":
        return ""
    return f"`{action.default}`"


def _cell(text: str | None) -> str:
    return " ".join((text or "").replace("%%", "%").replace("|", "\\|").split())


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The page: per subcommand, its description and one row per flag (flag, default, what it does)."""
    from gnn_dist.cli.main import build_parser

    parser = parser or build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    out = [HEADER]
    for name, p in sub.choices.items():
        out.append(f"## gnn-dist {name}\n\n{_cell(helps.get(name) or p.description)}\n")
        out.append("| flag | default | what it does |\n|---|---|---|")
        for action in p._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            out.append(f"| {_flag(action)} | {_default(action)} | {_cell(action.help)} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
