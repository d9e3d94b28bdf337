"""Which training step an exchange is in, and the name of each training exchange within it.

Steps matter to the policies: adaptive bit-widths re-solve at set steps, skipping refreshes every
`refresh_every` steps, stale blocks age by steps. A loop that calls `end_step` after every optimiser
step (gnn-dist's own, `gnn_dist.train.loop`) says where steps end. Without it the clock guesses: a
step ends when gradients went back, or, in a model that sends none, when the step's first owner
exchanges again. The guess is wrong for a layer that exchanges several times over inputs with no
weight before it (SGC's hops: each hop looks like a new step), so it warns once per process.
"""
from __future__ import annotations

import warnings

_WARNED: list[bool] = []


class StepClock:
    """One exchange's step count, whether the next training call begins a step, and its channel names."""

    def __init__(self) -> None:
        self.epoch = 0  # training steps begun before the current one
        self.owners: dict = {}  # module (or key) -> channel index, in order of first training use
        self.calls: dict = {}  # owner -> calls within the current step
        self.first = None  # the current step's first owner
        self.backward_seen = self.backward_ever = False  # gradients went back this step / ever
        self.explicit = False  # steps end by `end_step`, never guessed
        self.step_over = False  # `end_step` came: the next training call begins a step

    def name(self, owner: object) -> str:
        """The channel of `owner`'s next training exchange ("L<i>", or "L<i>.<k>" for its k-th call within a
        step; its `channel_label` instead of "L<i>" where it has one); begins a step first where one is due."""
        if self.explicit:
            new_step = self.step_over
        else:
            new_step = self.backward_seen or (not self.backward_ever and owner is self.first and owner in self.calls)
            if new_step:
                _warn_guessed_step()
        if new_step:
            self.epoch += 1
            self.calls.clear()
            self.backward_seen = self.step_over = False
        if not self.calls:
            self.first = owner
        index = self.owners.setdefault(owner, len(self.owners))
        k = self.calls.get(owner, 0)
        self.calls[owner] = k + 1
        label = getattr(owner, "channel_label", None) or f"L{index}"
        return label if k == 0 else f"{label}.{k}"

    def backward(self) -> None:
        """Gradients went back: the guess (without `end_step`) begins a step at the next training call."""
        self.backward_seen = self.backward_ever = True

    def end_step(self) -> None:
        """The caller's step is over; from now on steps end only here."""
        self.explicit = self.step_over = True

    def state_dict(self) -> dict:
        """The step count and whether the next training call begins a step (a fresh clock would say no)."""
        due = self.step_over if self.explicit else self.backward_seen or (not self.backward_ever and bool(self.calls))
        return {"epoch": int(self.epoch), "backward_ever": bool(self.backward_ever), "new_step": bool(due)}

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state_dict`'s (older checkpoints hold the same three keys)."""
        self.epoch, self.backward_ever = state["epoch"], state["backward_ever"]
        self.backward_seen = self.step_over = state["new_step"]


def _warn_guessed_step() -> None:
    """Once per process: a loop that does not call `end_step` has its steps guessed."""
    if not _WARNED:
        _WARNED.append(True)
        warnings.warn("gnn-dist: the halo exchange guessed where a training step ends (at the first exchange after "
                      "gradients went back); call graph.exchange.loop_ends_steps() before the first step and "
                      "graph.exchange.end_step() after each optimiser step, as gnn-dist's own loop does "
                      "(docs/layers.md, 'Your own training loop')", stacklevel=6)
