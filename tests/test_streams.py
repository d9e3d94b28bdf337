"""Random streams per (seed, epoch, rank, purpose): dropout and dither do not shift each other, and an epoch's
streams reopen where they began (what an exact resume needs)."""
from __future__ import annotations

import pytest
import torch

from gnn_dist.nn import dropout as dropout_mod
from gnn_dist.runtime import codec, streams, tuning


@pytest.fixture(autouse=True)
def no_open_epoch():
    yield
    streams.end()


def epoch_draws(seed: int, epoch: int, rank: int, encodes: int) -> tuple[list, list]:
    """Two dropout keys and two dither keys of one epoch, with `encodes` codec calls in between."""
    streams.begin(seed, epoch, rank)
    dropout_keys, dither_keys = [streams.dropout_key()], [streams.dither_key()]
    x = torch.randn(20, 12, generator=torch.Generator().manual_seed(0))
    for _ in range(encodes):
        codec.encode_rows(x, "int8")
    dropout_keys.append(streams.dropout_key())
    dither_keys.append(streams.dither_key())
    streams.end()
    return dropout_keys, dither_keys


def test_codec_calls_do_not_move_the_dropout_stream_and_an_epoch_reopens_alike():
    keys, dither = epoch_draws(3, 5, 1, encodes=0)
    keys_after_encodes, dither_after = epoch_draws(3, 5, 1, encodes=4)
    assert keys == keys_after_encodes  # encodes drew nothing from dropout's stream
    assert dither[0] == dither_after[0] and dither[1] != dither_after[1]  # they did draw from their own
    assert epoch_draws(3, 5, 1, encodes=0) == (keys, dither)  # reopened: the same draws
    others = [epoch_draws(*where, encodes=0)[0] for where in ((3, 6, 1), (3, 5, 0), (4, 5, 1))]
    assert all(k != keys for k in others)  # another epoch, rank or seed: another stream


def test_dropout_keeps_the_per_epoch_seed_it_had():
    """Exact-message runs draw the masks they drew before the streams were separated."""
    streams.begin(7, 2, 1)
    key = streams.dropout_key()
    torch.manual_seed((7 * 1_000_003 + 2 * 7919 + 1) % (2**63 - 1))  # the loop's former per-epoch seed
    assert key == int(torch.randint(0, 2**62, (1,)))


def test_torch_dropout_draws_from_the_stream_and_leaves_the_default_generator_alone(monkeypatch):
    torch_dropout_draws_from_the_stream("cpu", monkeypatch)  # CUDA's: tests/test_gpu.py


def torch_dropout_draws_from_the_stream(device: str, monkeypatch) -> None:
    """F.dropout (CUDA, or GNN_DIST_DROPOUT=torch) inside an epoch draws from the dropout stream; draws from
    torch's default generator in between move neither."""
    monkeypatch.setattr(tuning.ENV, "dropout_backend", "torch")
    x = torch.ones(4000, device=device)
    default = torch.cuda.default_generators[0] if device == "cuda" else torch.default_generator
    masks = []
    for noise in (0, 3):
        streams.begin(1, 4, 0)
        torch.rand(noise, device=device)  # someone else's draws on the default generator
        before = default.get_state()
        masks.append(dropout_mod.dropout(x, 0.5, True) == 0)
        assert torch.equal(default.get_state(), before)
        streams.end()
    assert torch.equal(masks[0], masks[1]) and 1000 < int(masks[0].sum()) < 3000
