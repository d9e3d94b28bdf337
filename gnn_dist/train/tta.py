"""Time to accuracy: when a run's model, picked by validation accuracy, first reaches a target test accuracy.

Epoch time alone flatters settings that trade accuracy for speed, so every
benchmark that compares exchange settings reports this instead (docs/benchmarks.md).
The records are a run's per-epoch log (`gnn-dist train --log`, or a
benchmark's own list): `epoch_time` (training only), `eval_time` (kept
apart, so evaluating every epoch does not distort the figure) and the
validation and test scores of that epoch (`val_acc`, `test_acc`; or `_f1`,
`_rocauc`, `_auc`).

Validation picks the epoch, as a user without the test labels would (a run
without a validation split, a dynamic graph's, is picked by its test score): after
epoch e the model kept is the one of the best validation score so far
(the first such epoch on ties), and the run has reached the target at the
first e where that model's test score is at least the target. The wall time
is the training time of epochs 0..e; the epochs, e + 1.
"""
from __future__ import annotations

from dataclasses import dataclass

MARGIN = 0.003  # the default target: the exact run's final test accuracy minus 0.3 points


def add_flags(ap, reference: str, scope: str = "") -> None:
    """`--eval-every` and `--target`, as every benchmark that compares settings by time to accuracy takes them;
    `reference` names the run whose final test accuracy sets the default target, `scope` prefixes the help."""
    ap.add_argument("--eval-every", type=int, default=1,
                    help=f"{scope}evaluate every N epochs, timed apart, for time to accuracy (0: the last epoch only)")
    ap.add_argument("--target", type=float, default=None,
                    help=f"{scope}test accuracy to reach (default: {reference}'s final test accuracy minus 0.3 points)")


@dataclass
class Reached:
    """Where a run first met the target, or that it never did (`epochs` None)."""

    epochs: int | None  # training epochs until the target was met
    wall_s: float | None  # their training time (evaluation excluded)
    test: float | None  # test score of the validation-picked model at that point
    eval_s: float  # evaluation time over the same epochs (or all of them, if not reached), for reference
    final_test: float | None  # the last epoch's test score

    def cell(self) -> str:
        """One table cell: 'wall s / epochs' or 'not reached'."""
        return f"{self.wall_s:.1f} s / {self.epochs} ep" if self.epochs is not None else "not reached"


def metric_of(records: list[dict]) -> str:
    """The score the records carry: acc, f1, rocauc or auc (the first a record has as test_<name>)."""
    for r in records:
        for name in ("acc", "f1", "rocauc", "auc"):
            if f"test_{name}" in r:
                return name
    raise ValueError("the records carry no test score (test_acc, test_f1, test_rocauc or test_auc)")


def _picker(records: list[dict], name: str) -> str:
    """The score that picks the epoch: validation, or the test score where a run has no validation split
    (dynamic graphs score train and test periods only)."""
    return f"val_{name}" if any(f"val_{name}" in r for r in records) else f"test_{name}"


def default_target(exact: list[dict], margin: float = MARGIN) -> float:
    """The exact run's test score at its last evaluated epoch, minus `margin`."""
    key = f"test_{metric_of(exact)}"
    return [r[key] for r in exact if key in r][-1] - margin


def time_to_target(records: list[dict], target: float) -> Reached:
    """When the validation-picked model of a run first has a test score >= target (see the module)."""
    name = metric_of(records)
    by = _picker(records, name)
    scored = [r[f"test_{name}"] for r in records if by in r]
    final = scored[-1] if scored else None
    wall = evals = 0.0
    best_val = picked = None
    for i, r in enumerate(records):
        wall += float(r.get("epoch_time", 0.0))
        evals += float(r.get("eval_time", 0.0))
        if by not in r:
            continue
        if best_val is None or r[by] > best_val:
            best_val, picked = r[by], r[f"test_{name}"]
        if picked >= target:
            return Reached(i + 1, wall, picked, evals, final)
    return Reached(None, None, None, evals, final)


def curve(records: list[dict]) -> tuple[list[float], list[float]]:
    """(cumulative training seconds, test score of the validation-picked model) at each evaluated epoch."""
    name = metric_of(records)
    by = _picker(records, name)
    wall, best_val, xs, ys = 0.0, None, [], []
    for r in records:
        wall += float(r.get("epoch_time", 0.0))
        if by not in r:
            continue
        if best_val is None or r[by] > best_val:
            best_val, picked = r[by], r[f"test_{name}"]
        xs.append(wall)
        ys.append(picked)
    return xs, ys


def table(runs: dict[str, list[dict]], target: float) -> str:
    """Per run: time and epochs to the target (or 'not reached'), that point's test score, the final one,
    and the evaluation time kept out of the figure."""
    first = next(iter(runs.values()))
    name = metric_of(first)
    w = max([24] + [len(label) for label in runs])
    by = "validation" if _picker(first, name).startswith("val_") else "no validation split: the test score"
    lines = [f"time to test {name} >= {target:.4f} ({by} picks the epoch; evaluation time apart)",
             f"{'setting':<{w}} {'to target':>18} {'test there':>10} {'final test':>10} {'eval s':>7}"]
    for label, records in runs.items():
        r = time_to_target(records, target)
        there = f"{r.test:.4f}" if r.test is not None else "-"
        final = f"{r.final_test:.4f}" if r.final_test is not None else "-"
        lines.append(f"{label:<{w}} {r.cell():>18} {there:>10} {final:>10} {r.eval_s:>7.1f}")
    return "\n".join(lines)
