"""The allocator setting the launcher applies: on glibc it takes, and GNN_DIST_MALLOC=system opts out."""
from __future__ import annotations

import platform

import pytest

from gnn_dist.runtime.malloc import keep_freed_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_applies_on_glibc():
    assert keep_freed_memory() is True


def test_system_setting_leaves_malloc_alone(monkeypatch):
    monkeypatch.setenv("GNN_DIST_MALLOC", "system")
    assert keep_freed_memory() is False
