"""Exchange policies on a one-rank gloo group (rank 0 sends its halo rows to itself), plus the bit solver."""
from __future__ import annotations

import pytest
import torch

from gnn_dist.runtime import codec
from gnn_dist.runtime.exchange import ExchangeConfig, HaloExchange, HaloPlan, Wire, policy_state
from gnn_dist.runtime.exchange.adaptive import solve_bits, variance
from gnn_dist.runtime.halo_fetch import fetch_halo


def make(cfg: ExchangeConfig, n: int = 50) -> HaloExchange:
    idx = torch.arange(0, n, 2)
    return HaloExchange(HaloPlan(idx, [idx.numel()], [idx.numel()]), Wire(), cfg)


def epoch(ex: HaloExchange, x: torch.Tensor) -> torch.Tensor:
    """One training-like round: forward exchange, then a backward one (which ends the step)."""
    channel = ex.channel("layer", training=True)
    got = ex.start(x, channel).wait()
    ex.start_backward(torch.zeros_like(got), channel).wait()
    return got


def test_fp32_is_exact(group):
    x = torch.randn(50, 6)
    assert torch.equal(epoch(make(ExchangeConfig()), x), x[::2])


@pytest.mark.parametrize("name", ["int8", "int4", "int2", "fp16", "bf16"])
def test_codecs_travel_and_decode(group, name):
    x = torch.randn(50, 6)
    ex = make(ExchangeConfig(codec=name))
    got = epoch(ex, x)
    step = (x[::2].amax(1) - x[::2].amin(1)).max() / (2 ** int(name[3:]) - 1) if name.startswith("int") else 0.02
    assert (got - x[::2]).abs().max() <= step * 1.01 + 1e-6
    sent = ex.epoch_metrics()["fwd.L0"]["bytes"][0]
    assert sent == codec.wire_bytes(25, 6, codec.for_width(name, 6))


@pytest.mark.parametrize("width", [8, 9])
def test_int8_rows_of_at_most_8_values_travel_as_fp16(group, width):
    """An int8 record of w values is w + 8 bytes: fp16 (2w) costs no more there, and is far more precise."""
    x = torch.randn(50, width)
    ex = make(ExchangeConfig(codec="int8"))
    got = epoch(ex, x)
    sent = ex.epoch_metrics()["fwd.L0"]["bytes"][0]
    if width <= 8:
        assert sent == 25 * 2 * width and torch.equal(got, x[::2].half().float())
    else:
        assert sent == 25 * (width + 8) and not torch.equal(got, x[::2].half().float())


def test_evaluation_is_exact_even_with_a_codec(group):
    x = torch.randn(50, 6)
    ex = make(ExchangeConfig(codec="int2"))
    assert ex.channel("layer", training=False) is None
    assert torch.equal(ex.start(x, None).wait(), x[::2])


def test_channels_are_named_by_module_and_call_within_a_step(group):
    ex = make(ExchangeConfig())
    first, second = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    for _ in range(3):  # three steps: the names repeat, whatever ran in between
        names = [ex.channel(first, True), ex.channel(second, True), ex.channel(second, True)]
        assert ex.channel(first, False) is None  # an evaluation in the middle changes nothing
        assert names == ["L0", "L1", "L1.1"]
        ex.start_backward(torch.zeros(25, 1), "L1.1").wait()
    assert ex.epoch == 2


def test_staleness_hands_out_last_epochs_block(group):
    ex = make(ExchangeConfig(staleness=1, momentum=0.0))
    xs = [torch.full((50, 3), float(e)) for e in range(4)]
    got = [epoch(ex, x) for x in xs]
    assert torch.equal(got[0], xs[0][::2])  # warm-up: fresh
    for e in (1, 2, 3):
        assert torch.equal(got[e], xs[e - 1][::2])  # one epoch stale


def test_stale_blocks_are_smoothed_by_default(group):
    """PipeGCN-GF: the block used is m * the block used last epoch + (1 - m) * the stale block received."""
    m = ExchangeConfig().momentum
    assert 0 < m < 1
    ex = make(ExchangeConfig(staleness=1))
    xs = [torch.full((50, 3), float(2**e)) for e in range(4)]
    got = [epoch(ex, x) for x in xs]
    want = xs[0][::2]
    assert torch.equal(got[0], want)
    for e in (1, 2, 3):
        want = m * want + (1 - m) * xs[e - 1][::2]
        assert torch.allclose(got[e], want)


@pytest.mark.parametrize("staleness,momentum", [(1, 0.95), (2, 0.95), (2, 0.0)])
def test_a_stale_block_given_to_autograd_is_never_written_again(group, staleness, momentum):
    """A layer with its own `message` reads the halo through HaloWait, so the block it gets is an autograd
    output: the next steps' smoothing must not write it (it did: 'Output 0 of HaloWait is a view and is
    being modified inplace' at the second step). Warm-up hands out the oldest block queued."""
    ex = make(ExchangeConfig(staleness=staleness, momentum=momentum))
    handed, kept = [], []
    for e in range(5):
        x = torch.full((50, 3), float(2**e), requires_grad=True)
        halo = fetch_halo(x, ex, ex.channel("layer", training=True))
        (halo * 2).sum().backward()
        assert torch.equal(x.grad[::2], torch.full((25, 3), 2.0))
        handed.append(halo)
        kept.append(halo.detach().clone())
    for h, k in zip(handed, kept):
        assert torch.equal(h.detach(), k)
    if not momentum:  # the block started S epochs ago, or the oldest one while none is that old
        assert [float(k[0, 0]) for k in kept] == [2.0 ** max(0, e - staleness) for e in range(5)]


def test_skip_threshold_resends_only_rows_that_moved(group):
    ex = make(ExchangeConfig(skip_threshold=0.1, refresh_every=3))
    x0 = torch.ones(50, 4)
    assert torch.equal(epoch(ex, x0), x0[::2])
    ex.epoch_metrics()
    x1 = x0.clone()
    x1[0] = 5.0  # moved a lot: resent
    x1[2] = 1.01  # moved 1%: skipped, the receiver keeps the old row
    got = epoch(ex, x1)
    assert torch.equal(got[0], x1[0]) and torch.equal(got[1], x0[2])
    assert ex.epoch_metrics()["fwd.L0"]["rows"] == [1]
    epoch(ex, x1)  # epoch 2
    assert torch.equal(epoch(ex, x1), x1[::2])  # epoch 3: forced refresh sends everything


def test_solver_spends_bits_where_variance_is():
    groups = {("fwd.L0", 0, 1): (1000.0, 100, 64), ("fwd.L1", 0, 1): (1.0, 1000, 64)}
    links = {(0, 1): (1e-8, 1e-4)}
    bits = solve_bits(groups, links, budget_bits=4)
    assert bits == {("fwd.L0", 0, 1): 8, ("fwd.L1", 0, 1): 2}
    spent = sum(codec.wire_bytes(groups[g][1], 64, f"int{bits[g]}") for g in groups)
    assert spent <= sum(codec.wire_bytes(groups[g][1], 64, "int4") for g in groups)
    total = sum(variance(r, w, bits[g]) for g, (r, _, w) in groups.items())
    assert total < sum(variance(r, w, 4) for (r, _, w) in groups.values())


def test_a_slow_link_gives_its_bits_to_a_fast_one_on_the_same_interface():
    """Sender 0 reaches receiver 1 over a link 100x slower than to receiver 2; receiver 2 can spare ingress
    because its other sender's rows barely vary: the fast link gets int8, the slow one int2."""
    groups = {("fwd.L0", 0, 1): (10.0, 100, 64), ("fwd.L0", 0, 2): (10.0, 100, 64),
              ("fwd.L0", 3, 2): (0.01, 300, 64)}
    links = {(0, 1): (1e-6, 0.0), (0, 2): (1e-8, 0.0), (3, 2): (1e-8, 0.0)}
    bits = solve_bits(groups, links, budget_bits=4)
    assert bits[("fwd.L0", 0, 1)] == 2 and bits[("fwd.L0", 0, 2)] == 8 and bits[("fwd.L0", 3, 2)] == 2


def test_no_interface_takes_longer_than_at_uniform_budget_bits():
    g = torch.Generator().manual_seed(0)
    world, channels = 5, ("fwd.L0", "fwd.L1", "bwd.L1", "bwd.L0")
    groups = {(c, s, d): (float(torch.rand(1, generator=g)) * 10 ** int(torch.randint(-3, 3, (1,), generator=g)),
                          int(torch.randint(0, 500, (1,), generator=g)), 16 if c.endswith("L1") else 128)
              for c in channels for s in range(world) for d in range(world) if s != d}
    links = {(s, d): (float(1e-8 * (1 + 4 * torch.rand(1, generator=g))), 1e-5)
             for s in range(world) for d in range(world) if s != d}
    bits = solve_bits(groups, links, budget_bits=4)
    alpha_in = {d: min(links[(s, d)][0] for s in range(world) if s != d) for d in range(world)}

    def seconds(bits_of, end: int, at_sender: bool) -> float:
        total = 0.0
        for k, (_, rows, width) in groups.items():
            if rows and k[1 if at_sender else 2] == end:
                alpha = links[(k[1], k[2])][0] if at_sender else alpha_in[k[2]]
                total += alpha * codec.wire_bytes(rows, width, f"int{bits_of(k)}") + links[(k[1], k[2])][1]
        return total

    assert len(set(bits.values())) > 1  # bits did move
    for end in range(world):
        for at_sender in (True, False):
            assert seconds(bits.__getitem__, end, at_sender) <= seconds(lambda k: 4, end, at_sender) * (1 + 1e-9)


def test_a_receivers_links_share_its_budget_too():
    """Senders 1 and 3 could each afford int8 on their own, but both feed receiver 2's one interface."""
    groups = {("fwd.L0", 0, 1): (10.0, 100, 64), ("fwd.L0", 0, 3): (10.0, 100, 64),
              ("fwd.L0", 1, 2): (10.0, 100, 64), ("fwd.L0", 3, 2): (10.0, 100, 64)}
    links = {(s, d): (1e-8, 0.0) for (_, s, d) in groups}
    bits = solve_bits(groups, links, budget_bits=4)
    assert bits[("fwd.L0", 1, 2)] == bits[("fwd.L0", 3, 2)] == 4
    into_2 = sum(codec.wire_bytes(100, 64, f"int{bits[g]}") for g in groups if g[2] == 2)
    assert into_2 <= 2 * codec.wire_bytes(100, 64, "int4")



def train_second_layer(cfg: ExchangeConfig, steps: int = 300) -> tuple[torch.Tensor, torch.Tensor]:
    """A two-layer model on one rank's tiny graph whose halo is its even rows, trained by full-batch gradient
    descent. The first layer is set by a schedule, not learned: its output (the boundary the second layer
    exchanges) moves for 10 steps, then stays. Its gradients still travel back (and are dropped). The second
    layer's loss is convex with weight decay, so every policy must end at exact's weights once its blocks
    have caught up with the still boundary. Returns (the second layer's weights, the last halo block used)."""
    g = torch.Generator().manual_seed(1)
    n, d, h, c = 60, 6, 8, 3
    x, w1 = torch.randn(n, d, generator=g), torch.randn(d, h, generator=g)
    adj = (torch.rand(n, n + n // 2, generator=g) < 0.1).float() + torch.eye(n, n + n // 2)
    adj = adj / adj.sum(1, keepdim=True)
    y = torch.randint(0, c, (n,), generator=g)
    w2 = torch.zeros(h, c, requires_grad=True)
    ex, owner = make(cfg, n), torch.nn.Linear(1, 1)
    for step in range(steps):
        frozen = (w1 * (1 + 3.0 / (step + 1)) if step < 10 else w1).requires_grad_()
        inner = torch.tanh(x @ frozen)
        halo = fetch_halo(inner, ex, ex.channel(owner, training=True))
        logits = adj @ torch.cat([inner, halo]) @ w2
        loss = torch.nn.functional.cross_entropy(logits, y) + 1e-2 * (w2 ** 2).sum()
        (grad,) = torch.autograd.grad(loss, w2, retain_graph=True)
        loss.backward()  # the halo's gradients go home through the exchange, as in training
        with torch.no_grad():
            w2 -= 2.0 * grad
    ex.drain()
    return w2.detach(), halo.detach()


@pytest.fixture(scope="module")
def exact_second_layer(group):
    return train_second_layer(ExchangeConfig()), train_second_layer(ExchangeConfig(), steps=12)


@pytest.mark.parametrize("cfg", [
    ExchangeConfig(staleness=1), ExchangeConfig(staleness=1, momentum=0.0), ExchangeConfig(staleness=2),
    ExchangeConfig(staleness=1, stale_form="correct"), ExchangeConfig(staleness=1, momentum=0.5, stale_warmup=5),
    ExchangeConfig(staleness=1, stale_form="correct", stale_bound=0.01),
    ExchangeConfig(skip_threshold=0.05, refresh_every=5)], ids=lambda c: (
        f"S{c.staleness}-{c.stale_form}-m{c.momentum}-w{c.stale_warmup}-b{c.stale_bound}" if c.staleness
        else f"skip{c.skip_threshold}-r{c.refresh_every}"))
def test_stale_and_skipped_blocks_converge_to_exact_once_the_boundary_stops(exact_second_layer, cfg):
    (exact_w, exact_halo), (early_exact_w, _) = exact_second_layer
    w, halo = train_second_layer(cfg)
    assert torch.allclose(halo, exact_halo, atol=1e-5)  # the blocks caught up with the boundary
    assert torch.allclose(w, exact_w, atol=1e-4), (w - exact_w).abs().max()  # and training ended where exact did
    early_w, _ = train_second_layer(cfg, steps=12)  # while the boundary moved, the policy did act
    assert not torch.allclose(early_w, early_exact_w, atol=1e-4)


def test_drift_after_a_warm_up_is_one_steps_change(group):
    """The drift-corrected form after an exact warm-up: on a boundary moving by the same step each epoch, the
    received block moved on by its drift is the current boundary from the first stale epoch on (the warm-up
    must not count the block it already used as a new one: the drift would read zero there)."""
    base, delta = torch.randn(50, 4), torch.randn(50, 4)
    ex = make(ExchangeConfig(staleness=1, momentum=0.0, stale_form="correct", stale_warmup=3))
    for t in range(6):
        got = epoch(ex, base + t * delta)
        assert torch.allclose(got, (base + t * delta)[::2], atol=1e-5), t


@pytest.mark.parametrize("cfg", [ExchangeConfig(), ExchangeConfig(codec="adaptive"),
                                 ExchangeConfig(stale_form="correct", stale_warmup=3, stale_grads="same")])
def test_a_checkpoint_from_before_the_stale_options_still_continues_other_settings(group, cfg):
    """Without staleness the stale options change nothing, so they do not make an older checkpoint's state
    (its settings: codec, staleness, momentum, skipping, adaptive) look foreign; with staleness they do."""
    ex = make(cfg)
    old = {"plan": [ex.send_counts, ex.recv_counts], "settings": [cfg.codec, 0, 0.95, cfg.skip_threshold, 10, 50, 4]}
    assert policy_state.mismatch(ex, old) is None
    stale = make(ExchangeConfig(staleness=1))
    assert policy_state.mismatch(stale, {**old, "settings": ["fp32", 1, 0.95, 0.0, 10, 50, 4]}) is not None


def test_a_provided_tensor_is_held_weakly_and_still_served(group):
    """provide(x): start(x) hands out the provided halo and sends nothing, a fresh tensor goes over the wire, and
    the exchange does not keep x alive (the step's dropped input would otherwise stand in backward's peak)."""
    import weakref

    ex = make(ExchangeConfig(staleness=1))
    x, halo = torch.randn(50, 3), torch.full((25, 3), 7.0)
    ex.provide(x, lambda e: halo)
    assert ex.start(x, ex.channel("conv", True)).wait() is halo
    y = x.clone()
    assert torch.equal(ex.start(y, None).wait(), y[::2])  # another tensor: the real exchange
    ref = weakref.ref(x)
    del x
    assert ref() is None
    assert torch.equal(ex.start(y, None).wait(), y[::2])


def test_a_halo_provided_as_rows_is_held_for_its_tensor_only_and_goes_with_it(group):
    """provide(x, rows): held(x) and start(x) give the rows and send nothing; another tensor is not held; a
    function (the input cache) is not held, as it fetches; x's entry, and so its rows, go when x goes."""
    import gc
    import weakref

    ex = make(ExchangeConfig())
    x, rows = torch.randn(50, 3), torch.full((25, 3), 7.0)
    ex.provide(x, rows)
    calls = ex.stats["fwd.eval"].calls
    assert ex.held(x) is rows and ex.start(x, None).wait() is rows and ex.stats["fwd.eval"].calls == calls
    assert ex.held(x.clone()) is None
    lazy = torch.randn(50, 3)
    ex.provide(lazy, lambda e, r=rows: r)
    assert ex.held(lazy) is None and ex.start(lazy, None).wait() is rows
    gone = weakref.ref(rows)
    del x, lazy, rows
    gc.collect()
    assert gone() is None and not ex._given


@pytest.mark.parametrize("cfg", [ExchangeConfig(staleness=1, momentum=0.0), ExchangeConfig(skip_threshold=10.0)])
def test_an_owner_that_does_not_reuse_rows_is_sent_fresh_and_whole(group, cfg):
    """Built-in layers that send rows after dropout set reuse_rows = False: staleness and skipping pass them by."""
    fresh, reused = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    fresh.reuse_rows = False
    ex = make(cfg)
    for e in range(3):
        x = torch.full((50, 3), float(2**e))
        got = {}
        for owner in (fresh, reused):
            channel = ex.channel(owner, training=True)
            got[owner] = ex.start(x, channel).wait()
            ex.start_backward(torch.zeros_like(got[owner]), channel).wait()
        assert torch.equal(got[fresh], x[::2])
        if e:  # the other owner's rows are last epoch's (stale) or were not re-sent (moved less than 10x)
            assert torch.equal(got[reused], torch.full((25, 3), 2.0 ** (e - 1) if cfg.staleness else 1.0))


@pytest.mark.parametrize("cfg", [ExchangeConfig(skip_threshold=1.0), ExchangeConfig(staleness=1, momentum=0.0),
                                 ExchangeConfig(staleness=1, momentum=0.95)])
def test_reused_rows_from_before_they_crossed_before_dropout_start_afresh(group, cfg):
    """A checkpoint written before issue 30 holds dropped rows as its stale blocks and skip references; the
    built-in models now reuse ReLU(h) rows and drop them after: continuing would drop them twice."""
    ex = make(cfg)
    stale = ["feed", 0, 0.0, "fresh"] if cfg.staleness else []
    old = [cfg.codec, cfg.staleness, cfg.momentum, cfg.skip_threshold, 10, 50, 4, *stale]  # as written before
    why = policy_state.mismatch(ex, {"plan": [ex.send_counts, ex.recv_counts], "settings": old})
    assert why is not None and "after dropout" in why
    assert policy_state.mismatch(ex, policy_state.save(ex)) is None


def test_received_gradients_are_summed_peer_by_peer_in_peer_order():
    """Row 0 gets 1e8 from peer 0, 1 from peer 1 and -1e8 from peer 2: in fp32, peer order gives exactly 0 (the 1
    is lost to 1e8), any other order 1 or 0 by chance; and the CPU's bits are one index_add_'s (nothing changed)."""
    from gnn_dist.runtime.transfers import ChannelStats, Pending, Ready, add_per_peer

    index = torch.tensor([0, 3, 0, 0, 5])
    splits = [2, 1, 2]
    rows = torch.tensor([[1e8], [2.0], [1.0], [-1e8], [4.0]])
    got = add_per_peer(torch.zeros(6, 1), index, rows, splits)
    assert got[:, 0].tolist() == [0.0, 0.0, 0.0, 2.0, 0.0, 4.0]
    gen = torch.Generator().manual_seed(0)
    index = torch.cat([torch.randperm(500, generator=gen)[:300] for _ in range(4)])  # repeats across peers only
    rows = torch.randn(1200, 16, generator=gen) * torch.logspace(-3, 3, 1200).unsqueeze(1)
    base = torch.randn(500, 16, generator=gen)
    one_call = base.clone().index_add_(0, index, rows)
    assert torch.equal(add_per_peer(base.clone(), index, rows, [300] * 4), one_call)
    assert torch.equal(Ready(rows).add_into(base.clone(), index, [300] * 4), one_call)
    calls = []

    def accumulate(target, idx):
        calls.append(len(idx))
        return add_per_peer(target, idx, rows, [300] * 4)

    pending = Pending(None, lambda: rows, ChannelStats(), accumulate=accumulate)
    assert torch.equal(pending.add_into(base.clone(), index, [300] * 4), one_call) and calls == [1200]
    pending.wait()  # once decoded, the decoded rows are summed, peer by peer
    assert torch.equal(pending.add_into(base.clone(), index, [300] * 4), one_call) and calls == [1200]


def test_reconfigure_only_before_the_first_training_exchange(group):
    """`--exchange auto` (and a resume) switch settings through `reconfigure`, which a live exchange refuses:
    its policies' state belongs to the settings it began with."""
    ex = make(ExchangeConfig())
    ex.reconfigure(ExchangeConfig(codec="int8"), auto_links={"measured": True})
    assert ex.config.codec == "int8" and ex.policy is None and ex.auto_links == {"measured": True}
    ex.channel("layer", training=False)  # evaluation begins no step
    ex.reconfigure(ExchangeConfig(staleness=1))
    ex.channel("layer", training=True)
    with pytest.raises(RuntimeError, match="only before its first training exchange"):
        ex.reconfigure(ExchangeConfig())
    assert ex.config.staleness == 1


def test_a_provided_halo_lasts_only_its_block(group):
    """`provided` scopes a fetched halo to the layers run inside it: a persistent input (an embedding table)
    must not meet one step's halo in the next, nor hold it in memory past its layers, even on an error."""
    from gnn_dist.runtime.halo_fetch import provided

    ex = make(ExchangeConfig())
    table, rows = torch.nn.Parameter(torch.randn(50, 3)), torch.full((25, 3), 7.0)
    with provided(ex, table, rows):
        assert ex.held(table) is rows
    assert ex.held(table) is None and not ex._given
    with pytest.raises(KeyError), provided(ex, table, rows):
        raise KeyError("a layer failed")
    assert ex.held(table) is None
    with provided(ex, table, None):  # nothing fetched (no reuse of rows): nothing held
        assert ex.held(table) is None


def test_building_an_exchange_runs_no_collective(monkeypatch):
    """Only the loader's `connect` (the wire's `agree`, the link measurement) talks to peers: a constructor that
    did would hang a rank that builds an exchange the others do not (snapshots, `--exchange auto`)."""
    import dataclasses

    from gnn_dist.runtime import transport
    from partition.errors import UsageError

    def collective(*args, **kwargs):
        raise AssertionError("a collective while building an exchange")

    for name in ("all_gather_object", "barrier", "all_reduce", "broadcast", "all_to_all_single"):
        monkeypatch.setattr(torch.distributed, name, collective)
    monkeypatch.setattr(transport, "all_to_all", collective)
    monkeypatch.setattr(transport, "agree_small", collective)
    plan = HaloPlan(torch.arange(4), [2, 2], [2, 2])
    links = {(0, 1): (1e-9, 1e-5), (1, 0): (1e-9, 1e-5)}
    for cfg in (ExchangeConfig(), ExchangeConfig(codec="int8"), ExchangeConfig(codec="adaptive", links=links),
                ExchangeConfig(staleness=1), ExchangeConfig(skip_threshold=0.1)):
        ex = HaloExchange(plan, Wire(), cfg)
        ex.reconfigure(ExchangeConfig(codec="adaptive", links=links))
    with pytest.raises(UsageError, match="link model"):
        HaloExchange(plan, Wire(), ExchangeConfig(codec="adaptive"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.send_counts = (4, 0)
    assert ex.send_counts == [2, 2] and ex.num_halo == 4 and ex.num_peers == 2


def test_a_bad_plan_or_wire_is_one_line():
    from partition.errors import UsageError

    for counts, needle in ((([2, 1], [2, 2]), "summing"), (([2, 2], [2]), "one send and one receive"),
                           (([2.5, 1.5], [2, 2]), "whole numbers"), (([5, -1], [2, 2]), "whole numbers")):
        with pytest.raises(UsageError, match=needle):
            HaloPlan(torch.arange(4), *counts)
    with pytest.raises(UsageError, match="1-D tensor"):
        HaloPlan([0, 1], [1, 1], [1, 1])
    with pytest.raises(UsageError, match="takes a HaloPlan and a Wire"):
        HaloExchange(HaloPlan(torch.arange(2), [1, 1], [1, 1]), ExchangeConfig())
    links = {(0, 1): (1e-9, 1e-5), (1, 0): (1e-9, 1e-5)}
    ex = HaloExchange(HaloPlan(torch.arange(2), [1, 1], [1, 1]), Wire())
    ex.reconfigure(ExchangeConfig(codec="adaptive"), auto_links=links)  # `--exchange auto`'s measured links
    assert ex.policy.links == links
