"""Progress that suits where it goes: a bar on a terminal, plain lines in a pipe or a log, or nothing.

tqdm redraws its bar with carriage returns. Under mpiexec no rank has a terminal (isatty is false even
under `script`), so a piped or logged run used to arrive as one huge line with the final result glued to
the bar. Mode "lines" writes one plain line per tenth of the run instead, each ending in a newline;
"auto" picks "bar" only when the stream is a terminal. Torch-free: the partitioning commands use it too.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

from partition.errors import UsageError

MODES = ("auto", "bar", "lines", "none")


def resolve(mode: str | bool | None, stream: TextIO | None = None) -> str:
    """'bar', 'lines' or 'none'. True or None mean "auto", False means "none" (the old `progress=` flag)."""
    if mode is None or mode is True:
        mode = "auto"
    elif mode is False:
        mode = "none"
    if mode not in MODES:
        raise UsageError(f"progress must be one of {', '.join(MODES)}, got {mode!r}")
    if mode != "auto":
        return mode
    stream = stream or sys.stderr
    isatty = getattr(stream, "isatty", None)
    return "bar" if isatty is not None and isatty() else "lines"


def add_flag(parser) -> None:
    """`--progress` (and `--quiet`, its old spelling of "none") on a command that shows progress."""
    parser.add_argument("--progress", default="auto", choices=MODES,
                        help="bar (redrawn in place), lines (one plain line per 10%% of the run, for pipes and "
                             "logs) or none; auto (default): bar on a terminal, lines otherwise, as under mpiexec")
    parser.add_argument("--quiet", action="store_true", help="no progress: the same as --progress none")


def flag_mode(args) -> str:
    """The mode a command's flags ask for; --quiet with any --progress but none is a contradiction."""
    if getattr(args, "quiet", False):
        if args.progress not in ("auto", "none"):
            raise UsageError(f"--quiet means --progress none; it contradicts --progress {args.progress}")
        return "none"
    return args.progress


class Progress:
    """A counter towards `total` (None: unknown), shown as a tqdm bar, as plain lines, or not at all.

    `lines` prints when the count reaches each further tenth of `total` (every step when there are fewer
    than ten), or, with no total, at most once per `interval` seconds; `close` prints the last count if
    the run stopped between tenths (early stopping), so the log always ends at the true count.
    """

    def __init__(self, total: int | None, desc: str, unit: str = "it", mode: str | bool | None = "auto",
                 initial: int = 0, stream: TextIO | None = None, interval: float = 10.0):
        self.stream = stream or sys.stderr
        self.mode = resolve(mode, self.stream)
        self.total, self.desc, self.unit, self.n, self.interval = total, desc, unit, initial, interval
        self.postfix: dict = {}
        self.t0 = self.last_t = time.perf_counter()
        self.shown = initial  # the count of the last line written
        self.bar = None
        if self.mode == "bar":
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=unit, file=self.stream, mininterval=1.0, initial=initial)

    def set_postfix(self, **values) -> None:
        """Figures shown after the count (loss, seconds per epoch, validation accuracy)."""
        self.postfix = values
        if self.bar is not None:
            self.bar.set_postfix(**values, refresh=False)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.mode == "lines" and self._due():
            self._line()

    def _due(self) -> bool:
        if not self.total:
            return time.perf_counter() - self.last_t >= self.interval
        return self.n * 10 // self.total > self.shown * 10 // self.total

    def _line(self) -> None:
        self.shown, self.last_t = self.n, time.perf_counter()
        count = f"{self.n}/{self.total} {self.unit} ({100 * self.n // self.total}%)" if self.total else f"{self.n} {self.unit}"
        extra = "".join(f", {k}={v}" for k, v in self.postfix.items())
        self.stream.write(f"{self.desc}: {count}, {self.last_t - self.t0:.1f}s{extra}\n")
        self.stream.flush()

    def write(self, line: str) -> None:
        """A message line that leaves the bar intact."""
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.mode == "lines" and self.n != self.shown:
            self._line()
        self.mode, self.bar = "none", None  # a second close does nothing

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
