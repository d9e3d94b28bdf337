"""docs/cli.md is the parser's own reference: every subcommand and flag, current."""
from __future__ import annotations

import argparse

from gnn_dist.cli.main import build_parser
from gnn_dist.cli.reference import render
from tests.conftest import ROOT


def test_the_cli_page_is_current():
    page = (ROOT / "docs" / "cli.md").read_text()
    assert page == render(), "docs/cli.md is stale: python -m gnn_dist.cli.reference > docs/cli.md"


def test_every_flag_of_every_subcommand_is_on_the_page():
    page = render()
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name, parser in sub.choices.items():
        assert f"## gnn-dist {name}\n" in page
        section = page.split(f"## gnn-dist {name}\n", 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}`" in section, (name, option)
            if action.option_strings and action.help is not argparse.SUPPRESS:  # what each flag acts on
                assert (action.help or "").strip(), f"gnn-dist {name} {action.option_strings[0]} has no help text"
