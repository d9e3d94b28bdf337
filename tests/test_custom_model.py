"""Your own model through the launcher: the console script imports it from the working directory, trains it
on P ranks, and `predict` gives what its PyG twin gives; an error in its code is its own, in one line."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import cli_partition, said

pytestmark = pytest.mark.slow  # multi-rank launches: `pytest -m 'not slow'` skips them

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))
GNN_DIST = str(Path(sys.executable).with_name("gnn-dist"))  # the console script, as a user runs it


def console(*args: str, ranks: int = 2, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([MPIEXEC, "-n", str(ranks), GNN_DIST, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def pyg_twin(model: torch.nn.Module) -> torch.nn.Module:
    """examples.custom_layer.GatedNet on torch_geometric's MessagePassing, same parameter names."""
    from torch_geometric.nn import MessagePassing

    class Gated(MessagePassing):
        def __init__(self, conv):
            super().__init__(aggr="add")
            self.gate, self.lin, self.root = (type(m)(m.in_features, m.out_features, bias=m.bias is not None)
                                              for m in (conv.gate, conv.lin, conv.root))

        def forward(self, x, edge_index):
            return self.lin(self.propagate(edge_index, x=x)) + self.root(x)

        def message(self, x_i, x_j):
            return torch.sigmoid(self.gate(torch.cat([x_i, x_j], dim=-1))) * x_j

    class Twin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = Gated(model.conv1), Gated(model.conv2)
            self.norm = torch.nn.BatchNorm1d(model.norm.num_features)

        def forward(self, x, edge_index):
            return self.conv2(torch.relu(self.norm(self.conv1(x, edge_index))), edge_index)

    twin = Twin()
    twin.load_state_dict(model.state_dict())
    return twin.eval()


@pytest.fixture(scope="module")
def cora2(tmp_path_factory):
    return cli_partition(tmp_path_factory.mktemp("custom"), "cora", 2)


def test_console_script_trains_a_module_model_and_predict_equals_pyg(cora2, tmp_path):
    model_file, preds = tmp_path / "m.pt", tmp_path / "p.npy"
    r = console("train", "--partition", str(cora2), "--model", "examples.custom_layer:build", "--epochs", "20",
                "--quiet", "--save-model", str(model_file))
    assert r.returncode == 0, r.stderr[-2000:]
    acc = float(r.stdout.split("test acc")[1].split()[0])
    assert 0.5 < acc <= 1.0, r.stdout  # Cora, 7 classes: chance is ~0.15
    r = console("predict", "--partition", str(cora2), "--model-file", str(model_file), "--out", str(preds),
                "--model", "examples.custom_layer:build")  # a user's model runs only when named again
    assert r.returncode == 0, r.stderr[-2000:]

    from examples.custom_layer import build
    from gnn_dist.data import load_dataset
    from gnn_dist.nn import ModelConfig

    g = load_dataset("cora")
    model = build(g.num_features, g.num_classes, ModelConfig())
    model.load_state_dict(torch.load(model_file, weights_only=True)["state"])
    ei = torch.stack([torch.from_numpy(a) for a in g.edge_index()]).long()
    with torch.no_grad():
        expected = pyg_twin(model)(torch.from_numpy(g.x), ei).numpy()
    np.testing.assert_allclose(np.load(preds), expected, rtol=1e-5, atol=1e-5)


USER_MODEL = '''
import torch
import gnn_dist as gd


class MeanConv(gd.nn.MessagePassing):
    def __init__(self, d_in, d_out):
        super().__init__(aggr="mean")
        self.lin = torch.nn.Linear(d_in, d_out)

    def forward(self, x, graph):
        h = self.propagate(graph, x=x)
        {bug}
        return self.lin(h)


class Net(torch.nn.Module):
    def __init__(self, d_in, d_out, config):
        super().__init__()
        self.conv1, self.conv2 = MeanConv(d_in, config.hidden), MeanConv(config.hidden, d_out)

    def forward(self, x, graph):
        return self.conv2(torch.relu(self.conv1(x, graph)), graph)


def build(num_features, num_classes, config):
    return Net(num_features, num_classes, config)
'''


def test_file_model_with_checkpoints_resume_codec_log_and_plot(tmp_path):
    part = cli_partition(tmp_path, "karate", 2)
    (tmp_path / "mine.py").write_text(USER_MODEL.format(bug="pass"))
    log, ckpt = tmp_path / "log.jsonl", tmp_path / "ck"
    common = ["train", "--partition", str(part), "--model", "mine.py:build", "--quiet", "--codec", "int8",
              "--log", str(log), "--checkpoint-dir", str(ckpt), "--checkpoint-every", "5", "--seed", "1"]
    r = console(*common, "--epochs", "10", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    r = console(*common, "--epochs", "20", "--resume", "--plot", str(tmp_path / "c.png"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    epochs = [json.loads(x)["epoch"] for x in log.read_text().splitlines()]
    assert epochs == list(range(20))  # resumed at 10, not from 0
    assert (tmp_path / "c.png").stat().st_size > 10_000
    assert any(k.startswith("fwd.L") for k in json.loads(log.read_text().splitlines()[-1])["halo"])


def test_an_unknown_module_is_one_line(tmp_path):
    part = cli_partition(tmp_path, "karate", 1)
    r = console("train", "--partition", str(part), "--model", "nosuchpkg.models:build", ranks=1)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "cannot import nosuchpkg.models" in lines[0], r.stderr


def test_an_error_in_user_code_is_reported_by_its_rank_and_everyone_leaves(tmp_path):
    """Rank 1's layer raises a shape error in epoch 3; no launcher ends the others (torchrun-style ranks)."""
    part = cli_partition(tmp_path, "karate", 4)
    bug = "if graph.part == 1 and self.lin.weight.grad is not None: h = h[:, :3]  # a shape bug, from step 2"
    (tmp_path / "buggy.py").write_text(USER_MODEL.format(bug=bug))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = []
    start = time.monotonic()
    for rank in range(4):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="4",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([GNN_DIST, "train", "--partition", str(part), "--model", "buggy.py:build",
                                       "--quiet", "--epochs", "50"], env=env, cwd=tmp_path,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    ended = {}
    while len(ended) < 4 and time.monotonic() - start < 120:
        for r, p in enumerate(procs):
            if r not in ended and p.poll() is not None:
                ended[r] = time.monotonic()
        time.sleep(0.05)
    errs = [p.communicate(timeout=10)[1] for p in procs]
    codes = [p.returncode for p in procs]
    assert all(c != 0 for c in codes), (codes, errs)
    assert codes[1] == 1, errs[1]
    lines = [ln for e in errs for ln in said(e)]
    assert len(lines) == 1, lines
    assert lines[0].startswith("[rank 1] gnn-dist: error: RuntimeError in ") and "buggy.py:" in lines[0]
    assert "(forward)" in lines[0] and "collective failed" not in lines[0]
    assert max(ended.values()) - ended[1] < 15, ended  # every rank gone within 15 s of the failing one
