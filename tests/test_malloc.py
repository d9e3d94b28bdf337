"""The allocator settings: glibc's (the launcher applies them; GNN_DIST_MALLOC=system opts out) and torch's huge
pages (the command line asks for them before torch loads)."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from gnn_dist.runtime.malloc import keep_freed_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_applies_on_glibc():
    assert keep_freed_memory() is True


def test_system_setting_leaves_malloc_alone(monkeypatch):
    monkeypatch.setenv("GNN_DIST_MALLOC", "system")
    assert keep_freed_memory() is False


def _huge_pages_in_child(code: str, env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("THP_MEM_ALLOC_ENABLE", "GNN_DIST_MALLOC")}
    if env_value is not None:
        env["THP_MEM_ALLOC_ENABLE"] = env_value
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout.strip()


def test_huge_pages_are_asked_for_before_torch_loads_and_a_users_choice_stands():
    ask = "from gnn_dist.runtime.malloc import prefer_huge_pages as p; r = p(); import os; "
    show = "print(r, os.environ.get('THP_MEM_ALLOC_ENABLE'))"
    assert _huge_pages_in_child(ask + show, None) == "True 1"
    assert _huge_pages_in_child(ask + show, "0") == "False 0"  # the user's setting is kept
    late = "import torch; " + ask + show  # torch read its setting at its first allocation: too late to change
    assert _huge_pages_in_child(late, None) == "False None"

    cli = ("import os, contextlib, io\nfrom gnn_dist.cli import main\nwith contextlib.suppress(SystemExit), "
           "contextlib.redirect_stdout(io.StringIO()):\n    main(['--help'])\nprint(os.environ.get('THP_MEM_ALLOC_ENABLE'))")
    assert _huge_pages_in_child(cli, None) == "1"  # the command line asks before it imports anything of torch's
