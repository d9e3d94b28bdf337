"""gd.save_model's spec: a built-in model records its own shape; a contradicting flag, or a model of your own
without a name, is refused before anything is written (the writing itself: tests/test_docs_blocks.py)."""
import pytest

import gnn_dist as gd
from gnn_dist.cli.model_file import _builtin_spec


def test_a_builtin_model_records_its_own_shape():
    gat = gd.nn.build_model("gat", 5, 8, 3, layers=3, dropout=0.2)
    assert _builtin_spec(gat) == {"name": "gat", "hidden": 8, "layers": 3, "heads": 1, "dropout": 0.2}
    assert _builtin_spec(gd.nn.GCNConv(4, 4)) is None


def test_a_flag_the_model_contradicts_or_a_nameless_own_model_is_one_line(tmp_path):
    gcn = gd.nn.build_model("gcn", 5, 16, 3)
    with pytest.raises(gd.UsageError, match="built-in gcn with hidden 16, not 32"):
        gd.save_model(tmp_path / "m.pt", gcn, None, hidden=32)
    with pytest.raises(gd.UsageError, match="built-in gcn with name gcn, not gat"):
        gd.save_model(tmp_path / "m.pt", gcn, None, name="gat")
    with pytest.raises(gd.UsageError, match="needs name='MODULE:FUNCTION'"):
        gd.save_model(tmp_path / "m.pt", gd.nn.GCNConv(4, 4), None)
    with pytest.raises(gd.UsageError, match="unknown model flag 'hiden'"):
        gd.save_model(tmp_path / "m.pt", gcn, None, hiden=16)
    assert not list(tmp_path.iterdir())
    with pytest.raises(AttributeError):  # a flag the model does not record (task) passes the check: ctx is used next
        gd.save_model(tmp_path / "m.pt", gcn, None, task="node")
