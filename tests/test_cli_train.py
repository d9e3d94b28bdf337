"""`gnn-dist train`: one clear line and exit 2 for each bad launch or argument."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli_partition, one_error_line, run_cli

MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))


def _one_line(r, needle):
    one_error_line(r, needle, strict=True)


@pytest.fixture(scope="module")
def karate2(tmp_path_factory):
    return cli_partition(tmp_path_factory.mktemp("train"), "karate", 2)


def test_wrong_rank_count_fails_on_every_rank(karate2):
    r = subprocess.run([MPIEXEC, "-n", "3", sys.executable, "-m", "gnn_dist", "train", "--partition", str(karate2)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and errors[0].startswith("[all 3 ranks] gnn-dist train: error: "), r.stderr  # once
    assert all("launched with 3 ranks but the partition has 2 parts" in ln for ln in errors)


def test_missing_partition(tmp_path):
    _one_line(run_cli("train", "--partition", str(tmp_path / "nope")), "does not exist")


@pytest.mark.slow  # multi-rank: the fast subset keeps a handful of launches (tests/conftest.py)
def test_corrupt_partition(karate2, tmp_path):
    d = tmp_path / "k"
    shutil.copytree(karate2, d)
    (d / "part-0" / "graph.npz").write_bytes(b"garbage")
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gnn_dist", "train", "--partition", str(d),
                        "--quiet"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "part-0/graph.npz fails its checksum" in r.stderr


def test_unknown_model(karate2):
    _one_line(run_cli("train", "--partition", str(karate2), "--model", "transformer"),
              "unknown model 'transformer' (choose from static: gcn | sage | gat | gin;")


@pytest.mark.slow  # multi-rank: the fast subset keeps a handful of launches (tests/conftest.py)
def test_node_classification_without_labels_says_so(tmp_path, capsys):
    """An edge list has no labels: the one line says so and points to link prediction (no torch warning first);
    refused before any rank starts, so in this process."""
    from gnn_dist.cli.main import main

    (tmp_path / "e.txt").write_text("0 1\n1 2\n2 3\n3 0\n0 2\n")
    part = tmp_path / "p"
    assert main(["partition", "--dataset", f"edges:{tmp_path / 'e.txt'}", "--parts", "1", "--out", str(part),
                 "--quiet"]) == 0
    capsys.readouterr()
    rc = main(["train", "--partition", str(part), "--epochs", "1"])
    _one_line(subprocess.CompletedProcess([], rc, "", capsys.readouterr().err),
              "has no node labels (its data set gave none, as an edge list does): node classification cannot "
              "train; use --task link")


def test_no_training_nodes_is_exit_2_on_every_rank(tmp_path):
    """Every rank finds the empty train mask alike: the one line (once per rank, at most), exit 2, no abort."""
    import numpy as np

    from tests.conftest import write_npz_graph

    rng = np.random.default_rng(0)
    f = write_npz_graph(tmp_path / "g.npz", rng.integers(0, 40, 200), rng.integers(0, 40, 200),
                        rng.standard_normal((40, 3)), rng.integers(0, 2, 40), train_mask=np.zeros(40, bool),
                        val_mask=np.arange(40) % 2 == 0, test_mask=np.arange(40) % 2 == 1)
    part = tmp_path / "p"
    assert run_cli("partition", "--dataset", f"file:{f}", "--parts", "2", "--out", str(part)).returncode == 0
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gnn_dist", "train", "--partition", str(part),
                        "--quiet"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    # every rank meets it: printed once (gnn_dist.runtime.alike)
    assert lines == ["[all 2 ranks] gnn-dist train: error: no training nodes in the partition (train mask empty on "
                     "every rank)"], r.stderr


@pytest.mark.parametrize("flags,needle", [
    (["--lr", "-1"], "--lr must be > 0"),
    (["--dropout", "1.5"], "--dropout must be in [0, 1)"),
    (["--epochs", "0"], "--epochs must be >= 1"),
    (["--hidden", "0"], "--hidden must be >= 1"),
    (["--layers", "two"], "invalid int value: 'two'"),
    (["--window", "4"], "--window applies to dynamic graphs"),  # a flag this kind of graph does not use: refused
    (["--relagg"], "--relagg applies to --model rgcn"),
    (["--num-bases", "3"], "--num-bases applies to --model rgcn"),
    (["--num-bases", "2"], "--num-bases applies to --model rgcn"),  # the default's value, given: refused too
    (["--heads", "4"], "--heads applies to --model gat"),
    (["--stale-momentum", "0.5"], "--stale-* shape the stale blocks of --staleness S"),
    (["--stale-bound", "nan"], "stale bound >= 0 required"),  # a bad value is named first
    (["--refresh-every", "5"], "--refresh-every applies with --skip-threshold"),
    (["--refresh-every", "5", "--exchange", "auto"], "--refresh-every applies with --skip-threshold"),
    (["--budget-bits", "2"], "--adaptive-every and --budget-bits apply to --codec adaptive"),
])
def test_bad_hyper_parameters(karate2, flags, needle, capsys):
    """Bad values, and flags that would mean nothing: refused before any rank starts, so in this process, in
    one line, exit 2."""
    from gnn_dist.cli.main import main

    capsys.readouterr()
    try:
        rc = main(["train", "--partition", str(karate2), *flags])
    except SystemExit as e:  # argparse's own refusals
        rc = e.code
    _one_line(subprocess.CompletedProcess(flags, rc, "", capsys.readouterr().err), needle)


@pytest.mark.slow  # multi-rank: the fast subset keeps a handful of launches (tests/conftest.py)
def test_trains_and_saves_a_model_that_loads_single_process(karate2, tmp_path):
    model_file = tmp_path / "m.pt"
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gnn_dist", "train", "--partition", str(karate2),
                        "--epochs", "30", "--quiet", "--save-model", str(model_file), "--model", "sage"],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    final = dict(part.rsplit(" ", 1) for part in r.stdout.strip().splitlines()[-1].split(" | ")[1:])
    assert set(final) == {"train acc", "val acc", "test acc"}, r.stdout
    assert float(final["train acc"]) == 1.0 and 0.5 <= float(final["test acc"]) <= 1.0, r.stdout
    import torch

    from gnn_dist.data import load_dataset
    from gnn_dist.graph.local import LocalGraph
    from gnn_dist.nn import build_model

    g = load_dataset("karate")
    model = build_model("sage", g.num_features, 16, g.num_classes)
    saved = torch.load(model_file, weights_only=True)  # tensors and plain values only
    assert saved["format"] == "gnn-dist-model" and saved["model"]["name"] == "sage"
    model.load_state_dict(saved["state"])
    model.eval()
    acc = (model(torch.from_numpy(g.x), LocalGraph.from_graph(g)).argmax(1).numpy() == g.y)[g.train_mask].mean()
    assert acc == 1.0  # four train nodes, 30 epochs: memorised


@pytest.mark.slow
def test_predict_equals_the_exported_pyg_model(karate2, tmp_path):
    """Distributed training, distributed predict, and a single-process PyG model with the same weights agree."""
    import numpy as np
    import torch

    from gnn_dist.data import load_dataset
    from gnn_dist.nn import build_model, to_pyg

    model_file, preds = tmp_path / "m.pt", tmp_path / "p.npy"
    for cmd in (["train", "--partition", str(karate2), "--epochs", "20", "--quiet", "--save-model", str(model_file),
                 "--model", "gcn", "--hidden", "8"],
                ["predict", "--partition", str(karate2), "--model-file", str(model_file), "--out", str(preds)]):
        r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gnn_dist", *cmd], capture_output=True,
                           text=True, timeout=180)
        assert r.returncode == 0, r.stderr[-2000:]
    g = load_dataset("karate")
    model = build_model("gcn", g.num_features, 8, g.num_classes)
    model.load_state_dict(torch.load(model_file, weights_only=True)["state"])
    ref = to_pyg(model).eval()
    edge_index = torch.stack([torch.from_numpy(a) for a in g.edge_index()])
    with torch.no_grad():
        expected = ref(torch.from_numpy(g.x), edge_index).numpy()
    np.testing.assert_allclose(np.load(preds), expected, rtol=1e-5, atol=1e-6)
    _one_line(run_cli("predict", "--partition", str(karate2), "--model-file", str(tmp_path / "none.pt"), "--out",
                      str(tmp_path / "x.npy")), "model file")


@pytest.mark.slow  # multi-rank: the fast subset keeps a handful of launches (tests/conftest.py)
def test_early_stop_keeps_the_best_weights_and_schedules_the_lr(karate2, tmp_path):
    import json

    log, ck = tmp_path / "log.jsonl", tmp_path / "ck"
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gnn_dist", "train", "--partition", str(karate2),
                        "--epochs", "300", "--quiet", "--early-stop", "5", "--lr-schedule", "step", "--lr-step", "2",
                        "--lr-gamma", "0.5", "--log", str(log), "--checkpoint-dir", str(ck), "--checkpoint-every", "4",
                        "--plot", str(tmp_path / "curves.png")],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    records = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(records) < 300 and "early stop after epoch" in r.stderr and "weights of best epoch" in r.stdout
    assert records[3]["lr"] == 0.01 * 0.5 ** 2  # halved every 2 epochs
    assert (ck / "best.pt").is_file() and (tmp_path / "curves.png").stat().st_size > 10_000
    import torch

    for name, fmt in (("best.pt", "gnn-dist-best"), ("checkpoint.pt", "gnn-dist-checkpoint")):
        saved = torch.load(ck / name, weights_only=True)  # tensors and plain values only
        assert (saved["format"], saved["version"]) == (fmt, 2)
    assert len(torch.load(ck / "checkpoint.pt", weights_only=True)["exchange"]) == 2  # each rank's exchange state


# Run before anything else by `python -m gnn_dist` when its folder leads PYTHONPATH: no tensorboard package, or a
# fake one whose SummaryWriter writes (tag, value, step) as JSON lines to FOLDER/scalars.jsonl.
HIDE_TENSORBOARD = "import sys\nsys.modules['tensorboard'] = None  # find_spec gives None, import fails\n"
FAKE_TENSORBOARD = """import importlib.machinery, json, os, sys, types
tb = types.ModuleType("tensorboard")
tb.__spec__ = importlib.machinery.ModuleSpec("tensorboard", None)
class SummaryWriter:
    def __init__(self, folder):
        os.makedirs(folder, exist_ok=True)
        self.f = open(os.path.join(folder, "scalars.jsonl"), "a")
    def add_scalar(self, tag, value, step):
        self.f.write(json.dumps([tag, value, step]) + "\\n")
    def flush(self):
        self.f.flush()
    def close(self):
        self.f.close()
writer = types.ModuleType("torch.utils.tensorboard")
writer.SummaryWriter = SummaryWriter
sys.modules.update({"tensorboard": tb, "torch.utils.tensorboard": writer})
"""


@pytest.fixture(scope="module")
def karate1(tmp_path_factory):
    return cli_partition(tmp_path_factory.mktemp("train1"), "karate", 1)


def _train_with_site(tmp_path, part, site: str | None, *args: str):
    """`gnn-dist train` at P=1 with --tensorboard, after `site` ran as sitecustomize (None: as installed)."""
    env = {}
    if site is not None:
        (tmp_path / "site").mkdir()
        (tmp_path / "site" / "sitecustomize.py").write_text(site)
        env["PYTHONPATH"] = str(tmp_path / "site")
    return run_cli("train", "--partition", str(part), "--quiet", "--tensorboard", str(tmp_path / "tb"), *args, env=env)


@pytest.mark.slow  # seconds of subprocess start-up: the full suite runs it, the fast subset has others of its kind
def test_tensorboard_missing_is_one_line(karate1, tmp_path):
    r = _train_with_site(tmp_path, karate1, HIDE_TENSORBOARD, "--epochs", "2")
    _one_line(r, "--tensorboard needs the tensorboard package")
    assert not (tmp_path / "tb").exists()


@pytest.mark.slow  # seconds of subprocess start-up: the full suite runs it, the fast subset has others of its kind
def test_tensorboard_gets_every_epochs_numbers(karate1, tmp_path):
    """Through a fake SummaryWriter: each epoch's loss (as --log records it), its step, and no non-numbers."""
    log = tmp_path / "log.jsonl"
    r = _train_with_site(tmp_path, karate1, FAKE_TENSORBOARD, "--epochs", "3", "--log", str(log))
    assert r.returncode == 0, r.stderr
    scalars = [json.loads(line) for line in (tmp_path / "tb" / "scalars.jsonl").read_text().splitlines()]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(v, s) for t, v, s in scalars if t == "loss"] == [(rec["loss"], rec["epoch"]) for rec in records]
    assert {t for t, _, _ in scalars} >= {"loss", "val_acc", "epoch_time", "lr"} and "halo" not in {t for t, _, _ in scalars}


def test_tensorboard_event_files_when_installed(karate1, tmp_path):
    pytest.importorskip("tensorboard")
    r = _train_with_site(tmp_path, karate1, None, "--epochs", "2")
    assert r.returncode == 0, r.stderr
    assert any(f.name.startswith("events.out.tfevents") for f in (tmp_path / "tb").iterdir())


MEMORY_KEYS = ["features", "graph and operators", "halo buffers", "activations", "step temporaries",
               "parameters and gradients", "optimizer state", "numba kernels", "allocator's free heap", "runtime",
               "sum", "peak RSS", "not attributed", "USS now"]


def _memory_rows(stderr: str, ranks: int) -> list[dict]:
    lines = stderr.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("rank "))
    assert lines[head].split()[1:] == " ".join(MEMORY_KEYS).split()
    return [dict(zip(MEMORY_KEYS, map(float, lines[head + 1 + r].split()[1:]))) for r in range(ranks)]


def _assert_attributed(row: dict) -> None:
    """At least 90% of the peak is in named rows; the step (saved activations and temporaries) and numba's
    compiler are a large share of it at this size, so leaving either out falls below (planted: 75-85%)."""
    assert row["sum"] <= row["peak RSS"] * 1.02 and row["runtime"] > 100  # torch alone is a few hundred MB
    assert row["activations"] > 0 and row["step temporaries"] > 0 and row["numba kernels"] > 0
    assert row["sum"] >= 0.9 * row["peak RSS"], row
    assert row["not attributed"] <= 0.1 * row["peak RSS"], row


@pytest.mark.slow  # seconds of subprocess start-up: the full suite runs it, the fast subset has others of its kind
def test_memory_report_attributes_the_peak_one_process(tmp_path):
    """One process, a graph whose step is a third of the peak: at least 90% of the peak has an owner."""
    part = cli_partition(tmp_path, "sbm:nodes=30000,features=64,avg_degree=6,seed=2", 1)
    r = run_cli("train", "--partition", str(part), "--epochs", "1", "--hidden", "512", "--quiet", "--memory-report")
    assert r.returncode == 0, r.stderr[-2000:]
    _assert_attributed(_memory_rows(r.stderr, 1)[0])


@pytest.mark.slow
def test_memory_report_counts_what_each_rank_holds(tmp_path):
    """Two ranks on an SBM: one row per rank; features are exactly the rank's rows; parameters and Adam's
    state exactly theirs; at least 90% of each rank's peak is in named rows."""
    part = cli_partition(tmp_path, "sbm:nodes=30000,features=64,avg_degree=6,seed=2", 2)
    log = tmp_path / "log.jsonl"
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gnn_dist", "train", "--partition", str(part),
                        "--epochs", "2", "--hidden", "512", "--quiet", "--memory-report", "--log", str(log)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    meta = json.loads((part / "partition.json").read_text())
    for rank, row in enumerate(_memory_rows(r.stderr, 2)):
        inner = meta["parts"][rank]["inner"]
        assert abs(row["features"] - inner * 64 * 4 / 2**20) < 0.06  # printed to 0.1 MB
        assert row["halo buffers"] > 0
        params = (64 * 512 + 512 + 512 * meta["num_classes"] + meta["num_classes"]) * 4 / 2**20
        assert abs(row["parameters and gradients"] - 2 * params) < 0.06  # Adam: two moments per weight
        assert abs(row["optimizer state"] - 2 * params) < 0.06
        _assert_attributed(row)
    first = json.loads(log.read_text().splitlines()[0])
    assert first["halo_bytes_all_ranks"] > 0  # the report reads the exchange's counters without resetting them


def test_output_paths_are_checked_before_training(karate1, tmp_path, capsys):
    """Where the run writes is checked before it trains, in one line: a file in the way of a folder, a folder
    where a file goes. A missing folder is made (--log too, as --save-model and --plot make theirs)."""
    from gnn_dist.cli.main import main

    (tmp_path / "afile").write_text("")
    for flags, needle in ((["--save-model", str(tmp_path / "afile" / "m.pt")], "afile is a file, not a folder"),
                          (["--plot", str(tmp_path / "afile" / "p.png")], "afile is a file, not a folder"),
                          (["--log", str(tmp_path / "afile" / "x" / "l.jsonl")], "afile is a file, not a folder"),
                          (["--checkpoint-dir", str(tmp_path / "afile")], "is a file: give a folder to write"),
                          (["--save-model", str(tmp_path)], "is a folder: give a file to write")):
        capsys.readouterr()
        _one_line(subprocess.CompletedProcess(flags, main(["train", "--partition", str(karate1), *flags]), "",
                                              capsys.readouterr().err), needle)
    (tmp_path / "nothing").symlink_to(tmp_path / "gone")
    for flags, needle in ((["--save-model", str(tmp_path / "nothing" / "m.pt")], "is a link to nothing"),):
        capsys.readouterr()
        _one_line(subprocess.CompletedProcess(flags, main(["train", "--partition", str(karate1), *flags]), "",
                                              capsys.readouterr().err), needle)
    log, plot = tmp_path / "new" / "dir" / "log.jsonl", tmp_path / "new" / "plots" / "p.png"
    r = run_cli("train", "--partition", str(karate1), "--epochs", "2", "--log", str(log), "--progress", "none",
                *(["--plot", str(plot)] if importlib.util.find_spec("matplotlib") else []))
    assert r.returncode == 0, r.stderr
    assert len(log.read_text().splitlines()) >= 2
    assert plot.is_file() or not importlib.util.find_spec("matplotlib")
