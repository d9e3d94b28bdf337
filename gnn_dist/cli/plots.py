"""PNG plots of a partition (part sizes, halo volumes), of a training run (loss and accuracy curves), and of
time to accuracy (`gnn_dist.train.tta`'s records).

matplotlib is an optional extra (`pip install 'gnn-dist[plot]'`); without it
these functions say so in one line instead of failing deep inside.
"""
from __future__ import annotations

from pathlib import Path

from gnn_dist.train import tta
from partition.errors import MissingExtraError


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtraError("plots", "matplotlib", "plot") from None
    return plt


def _save(fig, out: Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)  # a missing folder is made, as for --save-model
    tmp = out.with_name(out.name + ".tmp.png")
    fig.tight_layout()
    fig.savefig(tmp, dpi=110)
    tmp.replace(out)
    return out


def plot_partition(meta: dict, out: str | Path) -> Path:
    """Bars per part: inner (central / marginal) and halo rows; the title carries cut and balance."""
    plt = _pyplot()
    rows = meta["parts"]
    k = range(len(rows))
    central = [r["central"] for r in rows]
    marginal = [r["inner"] - r["central"] for r in rows]
    halo = [r["halo"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.bar(k, central, label="central (no remote neighbour)")
    ax1.bar(k, marginal, bottom=central, label="marginal")
    ax1.set_xlabel("part")
    ax1.set_ylabel("inner nodes")
    ax1.legend(fontsize=8)
    ax1.set_title("part sizes")
    ax2.bar(k, halo, color="tab:red")
    ax2.set_xlabel("part")
    ax2.set_ylabel("halo rows (received per layer)")
    ax2.set_title("halo volume")
    for ax in (ax1, ax2):
        ax.set_xticks(list(k))
    s = meta.get("stats", {})
    if s:
        fig.suptitle(f"{meta.get('graph')}: {meta['num_parts']} parts by {meta.get('method')}, edge cut "
                     f"{100 * s['edge_cut_fraction']:.1f}%, balance {s['balance']:.3f}", fontsize=10)
    return _save(fig, out)


def plot_run(records: list[dict], out: str | Path) -> Path:
    """Loss per epoch, and every accuracy, F1, ROC-AUC or MSE the log holds, against epoch."""
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    epochs = [r["epoch"] for r in records]
    ax1.plot(epochs, [r["loss"] for r in records])
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("training loss")
    ax1.set_yscale("log")
    metrics = sorted({k for r in records for k in r if k.endswith(("_acc", "_f1", "_rocauc", "_mse"))})
    for m in metrics:
        pts = [(r["epoch"], r[m]) for r in records if m in r]
        ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="." if len(pts) < 30 else None, label=m)
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("metric")
    if metrics:
        ax2.legend(fontsize=8)
    return _save(fig, out)


def plot_tta(runs: dict[str, list[dict]], target: float, out: str, title: str = "") -> str:
    """Test score of the validation-picked model against training seconds, one line per run, the target
    dashed; written atomically to `out` (needs matplotlib)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, records in runs.items():
        xs, ys = tta.curve(records)
        ax.plot(xs, ys, label=label, lw=1.4)
    ax.axhline(target, ls="--", color="k", lw=0.8, label=f"target {target:.4f}")
    ys_all = [y for records in runs.values() for y in tta.curve(records)[1]]
    ax.set_ylim(max(min(ys_all, default=0.0), target - 0.05), max(ys_all, default=1.0) + 0.005)
    ax.set_xlabel("training time, s (evaluation excluded)")
    ax.set_ylabel(f"test {tta.metric_of(next(iter(runs.values())))} (best validation so far)")
    ax.set_title(title or "time to accuracy")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    return str(_save(fig, out))
