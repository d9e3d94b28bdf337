"""Two revisions side by side: a benchmark script run alternately on each, medians per setting.

    python scripts/bench_ab.py --base f577d68 [--head HEAD] [--repeat 5] [--out F.jsonl] -- \
        scripts/bench_exchange.py --parts 2 --layers 3 --epochs 30

Each revision is checked out into a git worktree (under --work); its runs import that tree's
gnn_dist (PYTHONPATH), so the benchmark, its workers and `gnn-dist` all run the revision's code.
Runs alternate base, head, base, head, ... so a busy spell on the machine hits both alike. Every
`[bench] NAME @ ...: X s/epoch, acc A` line the benchmark prints is a sample; the table gives each
setting's median epoch per revision, head over base, and whether the accuracies were identical (a
refactor that keeps results bit for bit keeps them). Needs what the benchmark needs (bench_exchange:
root). Each run's lines are appended to --out, and a rerun skips the runs that file already holds.
Revisions are commits: uncommitted edits are not in either checkout. Accuracies are compared as printed
(4 decimals), and a setting that chooses by measured timings (`auto`) may differ between runs of one
revision: "no" there means look, not broken.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = re.compile(r"^\[bench\] (?P<name>.+?): (?P<epoch>[0-9.]+) s/epoch, acc (?P<acc>[0-9.]+)")


def resolve(rev: str) -> str:
    """The commit `rev` names; one line and exit if it names none."""
    got = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                         capture_output=True, text=True)
    if got.returncode != 0:
        raise SystemExit(f"[ab] '{rev}' names no commit of {ROOT}")
    return got.stdout.strip()


def worktree(commit: str, work: Path) -> Path:
    """A checkout of `commit`, made once."""
    path = work / commit[:12]
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), commit], check=True,
                       capture_output=True)
    return path


def run_once(tree: Path, argv: list[str]) -> list[dict]:
    """One run of the benchmark from `tree`; its samples."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, *argv], cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"[ab] {tree.name}: the benchmark failed (exit {proc.returncode}): {tail[0]}")
    found = [m.groupdict() for m in map(SAMPLE.match, (proc.stdout + "\n" + proc.stderr).splitlines()) if m]
    if not found:
        raise SystemExit(f"[ab] {tree.name}: the benchmark printed no '[bench] NAME @ ...: X s/epoch' line")
    return [{"name": s["name"], "epoch_s": float(s["epoch"]), "acc": s["acc"]} for s in found]


def table(rows: list[dict], base: str, head: str) -> str:
    names = list(dict.fromkeys(r["name"] for r in rows))
    out = [f"{'setting':<30} {'base s':>8} {'head s':>8} {'head/base':>9}  runs  same acc",
           f"{'-' * 30} {'-' * 8} {'-' * 8} {'-' * 9}  ----  --------"]
    for name in names:
        of = lambda c: [r for r in rows if r["name"] == name and r["commit"] == c]
        a, b = of(base), of(head)
        if not a or not b:
            continue
        ma, mb = statistics.median(r["epoch_s"] for r in a), statistics.median(r["epoch_s"] for r in b)
        same = {r["acc"] for r in a} == {r["acc"] for r in b} and len({r["acc"] for r in a}) == 1
        out.append(f"{name:<30} {ma:>8.3f} {mb:>8.3f} {mb / ma:>9.3f}  {len(a)}/{len(b)}  {'yes' if same else 'no'}")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="the revision to compare against")
    p.add_argument("--head", default="HEAD")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", default="out/ab/runs.jsonl")
    p.add_argument("--work", default="/tmp/gnn-dist-ab", help="where the worktrees go")
    p.add_argument("bench", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS]: the benchmark and its arguments")
    a = p.parse_args()
    argv = a.bench[1:] if a.bench[:1] == ["--"] else a.bench
    if not argv:
        raise SystemExit("[ab] give the benchmark after --, e.g. -- scripts/bench_exchange.py --parts 2")
    if a.repeat < 1:
        raise SystemExit("[ab] --repeat must be at least 1")
    base, head = resolve(a.base), resolve(a.head)
    if base == head:
        raise SystemExit(f"[ab] --base and --head are the same commit ({base[:9]})")
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    trees = []
    try:
        for commit in (base, head):
            trees.append(worktree(commit, work))
        compare(a, argv, (base, trees[0]), (head, trees[1]))
    finally:  # the checkouts go; a rerun makes them again
        for tree in trees:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


def compare(a, argv: list[str], base_rev: tuple[str, Path], head_rev: tuple[str, Path]) -> None:
    (base, base_tree), (head, head_tree) = base_rev, head_rev
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    rows = [r for r in rows if r.get("argv") == argv]
    for rep in range(a.repeat):
        for commit, tree in ((base, base_tree), (head, head_tree)):
            if any(r["commit"] == commit and r["rep"] == rep for r in rows):
                continue
            print(f"[ab] run {rep + 1}/{a.repeat} of {commit[:9]}", file=sys.stderr, flush=True)
            new = [dict(s, commit=commit, rep=rep, argv=argv) for s in run_once(tree, argv)]
            with out.open("a") as f:
                f.writelines(json.dumps(r) + "\n" for r in new)
            rows += new
    print(f"base {base[:9]}, head {head[:9]}: {' '.join(argv)}, medians of {a.repeat} alternating runs")
    print(table(rows, base, head))


if __name__ == "__main__":
    main()
