"""`--model FILE.py:FUNCTION` imports the modules beside FILE.py, as `python FILE.py` would, from any folder."""
from __future__ import annotations

import sys

import pytest

from gnn_dist.nn import registry
from partition.errors import UsageError


def test_a_model_file_imports_its_neighbours(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    code = tmp_path / "code"
    code.mkdir()
    (code / "mylayer_for_test.py").write_text("import torch\nclass Net(torch.nn.Linear):\n    pass\n")
    (code / "model.py").write_text("from mylayer_for_test import Net\n\n"
                                   "def build(num_features, num_classes, config):\n"
                                   "    return Net(num_features, num_classes)\n")
    elsewhere = tmp_path / "run"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    model = registry.builder_of(f"{code / 'model.py'}:build")(4, 3, None)
    assert type(model).__name__ == "Net" and model.out_features == 3
    monkeypatch.delitem(sys.modules, "mylayer_for_test")


def test_a_missing_neighbour_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "model.py").write_text("from no_such_layer_module import Net\n")
    with pytest.raises(UsageError, match="No module named 'no_such_layer_module'"):
        registry.builder_of(f"{tmp_path / 'model.py'}:build")
