"""The allocator settings: glibc's (the launcher applies them; GNN_DIST_MALLOC=system opts out) and torch's huge
pages (`gnn-dist train` asks for them, for large activations only, before torch loads)."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from gnn_dist.runtime.malloc import activation_bytes, keep_freed_memory
from gnn_dist.runtime.tuning import HUGE_PAGES_MIN_BYTES


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


def test_huge_pages_only_for_large_activations_before_torch_loads_and_a_users_choice_stands():
    ask = "from gnn_dist.runtime.malloc import prefer_huge_pages as p; r = p({}); import os; "
    show = "print(r, os.environ.get('THP_MEM_ALLOC_ENABLE'))"
    big, small = ask.format(HUGE_PAGES_MIN_BYTES), ask.format(HUGE_PAGES_MIN_BYTES - 1)
    assert _huge_pages_in_child(big + show, None) == "True 1"
    assert _huge_pages_in_child(small + show, None) == "False None"  # smaller tensors ran slower with them
    assert _huge_pages_in_child(big + show, "0") == "False 0"  # the user's setting is kept
    assert _huge_pages_in_child(small + show, "1") == "True 1"
    late = "import torch; " + big + show  # torch read its setting at its first allocation: too late to change
    assert _huge_pages_in_child(late, None) == "False None"


def test_activation_bytes_is_the_largest_ranks_rows_by_the_wider_width():
    meta = {"num_features": 100, "parts": [{"inner": 10, "halo": 5}, {"inner": 12, "halo": 7}]}
    assert activation_bytes(meta, hidden=64) == 19 * 100 * 4
    assert activation_bytes(meta, hidden=256) == 19 * 256 * 4
    assert activation_bytes({"num_features": None}, hidden=16) == 0  # metadata without parts: no huge pages


def test_train_decides_on_huge_pages_from_the_partition_before_torch_loads(tmp_path):
    from gnn_dist.cli import main

    assert main(["partition", "--dataset", "karate", "--parts", "1", "--out", str(tmp_path / "k")]) == 0
    code = ("import sys, gnn_dist.runtime.tuning as m, gnn_dist.cli.train as t\n"
            "m.HUGE_PAGES_MIN_BYTES = 34 * 34 * 4  # karate: 34 rows, 34 features, hidden 16\n"
            "def stop(a):\n    print(__import__('os').environ.get('THP_MEM_ALLOC_ENABLE'), 'torch' in sys.modules); sys.exit(0)\n"
            "t.check_args = stop\n"
            f"from gnn_dist.cli import main; main(['train', '--partition', {str(tmp_path / 'k')!r}])")
    assert _huge_pages_in_child(code, None) == "1 False"
    assert _huge_pages_in_child(code.replace("34 * 34 * 4", "34 * 34 * 4 + 1"), None) == "None False"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_release_hands_a_one_off_phases_free_heap_back():
    """Under the keep-freed settings, 200 MB of 1 MB blocks freed stay resident until released (a block kept at
    the end pins the heap's top, as a long-lived tensor does after an operator build)."""
    code = ("import numpy as np\n"
            "from gnn_dist.runtime.malloc import heap_stats, keep_freed_memory, release_free_memory, resident_bytes, "
            "trimmed_bytes\n"
            "assert keep_freed_memory()\n"
            "blocks = [np.ones(1 << 17) for _ in range(200)]; pin = np.ones(1 << 17); del blocks\n"
            "before, free = resident_bytes(), heap_stats()[1]\n"
            "assert release_free_memory()\n"
            "print((before - resident_bytes()) >> 20, free >> 20, trimmed_bytes() >> 20)\n")
    env = {k: v for k, v in os.environ.items() if k != "GNN_DIST_MALLOC"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    released, free, trimmed = map(int, out.stdout.split() or [0, 0, 0])
    assert free >= 190 and trimmed >= 190 and released >= 150, out.stderr[-2000:]


_HIDING = ("import ctypes\n"
           "real = ctypes.CDLL\n"
           "class Hiding:  # a C library without the functions named in HIDE\n"
           "    def __init__(self, *a, **k): self.lib = real(*a, **k)\n"
           "    def __getattr__(self, name):\n"
           "        if name in HIDE: raise AttributeError(name)\n"
           "        return getattr(self.lib, name)\n"
           "ctypes.CDLL = Hiding\n"
           "from gnn_dist.runtime.malloc import heap_stats, keep_freed_memory, release_free_memory\n"
           "print(keep_freed_memory(), release_free_memory(), heap_stats())\n")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the C library is changed under glibc's names")
@pytest.mark.parametrize(("hide", "expected"), [(("mallinfo2",), "True True None"),  # glibc before 2.33
                                                (("mallopt", "malloc_trim", "mallinfo2"), "False False None")])  # musl, macOS
def test_older_or_other_c_libraries(hide, expected):
    """Without mallinfo2 (glibc 2.28-2.32: RHEL 8, Ubuntu 20.04) malloc is still tuned and trimmed, only the heap's
    figures are unknown; without mallopt nothing is touched and nothing fails."""
    env = {k: v for k, v in os.environ.items() if k != "GNN_DIST_MALLOC"}
    out = subprocess.run([sys.executable, "-c", f"HIDE = {hide!r}\n" + _HIDING], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == expected, out.stderr[-2000:]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
@pytest.mark.parametrize(("mode", "mapped"), [("always [madvise] never", 4), ("always madvise [never]", 0),
                                              (None, 0)])  # no setting: a kernel without THP
def test_blocks_mapped_afresh_only_where_the_kernel_gives_huge_pages(tmp_path, mode, mapped):
    """With THP_MEM_ALLOC_ENABLE=1, a 4 MB block is mapped afresh (one fault per 2 MB) only where the kernel's
    huge pages are on; with them off it would be faulted in 4 KB at a time every step, so it stays on the heap."""
    setting = tmp_path / "enabled"
    if mode is not None:
        setting.write_text(mode + "\n")
    code = ("import numpy as np\n"
            "from gnn_dist.runtime import malloc\n"
            f"malloc.KERNEL_HUGE_PAGES = {str(setting)!r}\n"
            "assert malloc.keep_freed_memory()\n"
            "before = malloc._glibc().mallinfo2().hblkhd\n"
            "block = np.ones(1 << 19)\n"
            "print((malloc._glibc().mallinfo2().hblkhd - before) >> 20)\n")
    env = {k: v for k, v in os.environ.items() if k != "GNN_DIST_MALLOC"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**env, "THP_MEM_ALLOC_ENABLE": "1"})
    assert out.stdout.strip() == str(mapped), out.stderr[-2000:]
