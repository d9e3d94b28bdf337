"""Random streams of a training run: one per purpose, each derived from (seed, epoch, rank, purpose).

Why separate streams: when hidden-layer dropout and the codecs' dither drew
from torch's one default generator, every quantised message shifted the
dropout masks of the layers after it, so a codec comparison mixed
quantisation with different masks; and a stream that only runs on (a dither
pool seeded once) does not restart where a resumed run starts. Here each
purpose's stream is a function of where the run is, so a resumed epoch draws
what the uninterrupted one drew, and no purpose shifts another.

- dropout: hidden layers' masks, per rank (`gnn_dist.nn.dropout`). A CPU and a
  CUDA generator seeded with `stream_seed(seed, epoch, rank, "dropout")`; the
  hashed dropout draws its key from the CPU one, F.dropout draws from the
  tensor's device's one (`drawing_from`).
- dither: the codecs' stochastic rounding, per rank. Every encode gets an
  explicit integer key, the epoch's dither key mixed with a count of the
  encodes before it in the epoch (`dither_key`).
- input: input-feature dropout, the same on every rank (`input_key`).
- torch: torch's default generators, for a user's own model code (plain
  F.dropout), reseeded per epoch so it too repeats on resume.

The training loop opens an epoch's streams (`begin`) and closes them after
the epoch (`end`). Outside an epoch (a user's own loop), dropout and dither
draw from torch's default generator, as torch code would.
"""
from __future__ import annotations

import contextlib

import torch

_M64 = (1 << 64) - 1
PURPOSES = {"dropout": 1, "dither": 2, "input": 3, "torch": 4}


def _splitmix(z: int) -> int:
    """splitmix64's finaliser: 64 well-mixed bits from any 64-bit value."""
    z = (z + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def derive(*values: int) -> int:
    """A 63-bit key from a sequence of integers (any sign or size), each step mixed: sub-keys of a key."""
    h = 0
    for v in values:
        h = _splitmix(h ^ (int(v) & _M64))
    return h >> 1


def stream_seed(seed: int, epoch: int, rank: int, purpose: str) -> int:
    """Seed of one purpose's stream in one epoch on one rank.

    Dropout keeps the formula its per-epoch seed had before the streams were
    separated, so an exact (fp32) run draws the same masks as before.
    """
    if purpose == "dropout":
        return (seed * 1_000_003 + epoch * 7919 + rank) % (2**63 - 1)
    return derive(seed, epoch, rank, PURPOSES[purpose])


def input_key(seed: int, epoch: int) -> int:
    """Input-dropout key per (seed, epoch), the same on every rank: ranks must drop a node's features alike."""
    return (((seed * 1_000_003 + epoch + 1) * 0x9E3779B97F4A7C15) % 2**64) >> 1


class EpochStreams:
    """One epoch's streams on one rank (generators are made on first use)."""

    def __init__(self, seed: int, epoch: int, rank: int):
        self.seed, self.epoch, self.rank = int(seed), int(epoch), int(rank)
        self._generators: dict[str, torch.Generator] = {}
        self._dither = stream_seed(seed, epoch, rank, "dither")
        self._encodes = 0

    def dropout_generator(self, device: torch.device) -> torch.Generator:
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        key = str(device)
        if key not in self._generators:
            g = torch.Generator(device=device)
            self._generators[key] = g.manual_seed(stream_seed(self.seed, self.epoch, self.rank, "dropout"))
        return self._generators[key]

    def dither_key(self) -> int:
        key = derive(self._dither, self._encodes)
        self._encodes += 1
        return key


_ACTIVE: EpochStreams | None = None  # a module global, not a context variable: autograd's device threads encode too


def begin(seed: int, epoch: int, rank: int) -> EpochStreams:
    """Open an epoch's streams; torch's default generators are reseeded for the epoch too (user code)."""
    global _ACTIVE
    torch.manual_seed(stream_seed(seed, epoch, rank, "torch"))
    _ACTIVE = EpochStreams(seed, epoch, rank)
    return _ACTIVE


def end() -> None:
    global _ACTIVE
    _ACTIVE = None


def active() -> EpochStreams | None:
    return _ACTIVE


def dither_key() -> int:
    """The key of the next encode: from the epoch's dither stream, or torch's default generator outside one."""
    if _ACTIVE is not None:
        return _ACTIVE.dither_key()
    return int(torch.randint(0, 2**62, (1,)))


def dropout_key() -> int:
    """The key of the next hashed dropout mask (CPU): from the epoch's dropout stream, or torch's default generator."""
    gen = _ACTIVE.dropout_generator(torch.device("cpu")) if _ACTIVE is not None else None
    return int(torch.randint(0, 2**62, (1,), generator=gen))


@contextlib.contextmanager
def drawing_from(generator: torch.Generator):
    """Code inside draws from `generator` where it can only draw from its device's default generator (F.dropout).

    The generator's state is swapped into the default one and back, so both streams continue where they were.
    """
    device = generator.device
    default = torch.cuda.default_generators[device.index] if device.type == "cuda" else torch.default_generator
    saved = default.get_state()
    default.set_state(generator.get_state())
    try:
        yield
    finally:
        generator.set_state(default.get_state())
        default.set_state(saved)


@contextlib.contextmanager
def dropout_stream(device: torch.device):
    """F.dropout on `device` inside draws from the epoch's dropout stream (outside an epoch: unchanged)."""
    if _ACTIVE is None:
        yield
        return
    with drawing_from(_ACTIVE.dropout_generator(device)):
        yield
