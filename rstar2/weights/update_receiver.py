"""A rollout worker's side of a weight push over the bus: bucket staging, as plain code.

The learner sends every rollout worker each policy version as `WeightUpdate` buckets numbered
0, 1, ... (`WeightUpdate.bucket`, `rstar2.weights.push.BusPush`). `UpdateReceiver.receive(msg)`
takes them in order and answers what to load:

- a final bucket: the state dict to load now, the buckets staged since the previous final one
  and this one together (a synchronous push marks every bucket final, so each loads alone; an
  asynchronous one only its empty last bucket, so the whole version loads at once and no turn
  sees half an update);
- any other bucket: None (staged until its version's final bucket).

A bucket that does not fit is refused with a ValueError naming its version and number, and
nothing staged changes: one of an older version than a bucket already received, a duplicate
or one out of order (not the next number of its version), a tensor name already staged, or
names, shapes and buffer that do not match. A bucket of a newer version while an older one is
staged drops the staged buckets (a push abandoned before its final bucket: the engine keeps
the weights it has) with a warning.

The tensors are views of a copy of the message's buffer (the bus hands the worker read-only
frames); the engine copies them onto its device as it loads.

What it does not do: load (the worker, under its weight gate, `rstar2.rollout.weight_gate`),
talk to the bus, or receive through the learner's weight group (`group_member.py`).
"""

from __future__ import annotations

import logging

import torch

from rstar2.weights.flat_codec import unflatten_weights
from rstar2.wire import WeightUpdate

log = logging.getLogger(__name__)


class UpdateReceiver:
    """Bucket staging for one rollout worker (see the module docstring)."""

    def __init__(self) -> None:
        self.version = -1
        """The version of the latest bucket received (-1: none yet)."""
        self.next_bucket = 0
        """The number the next bucket of `version` must have."""
        self.staged: dict[str, torch.Tensor] = {}
        """Tensors of `version`'s buckets received since its last final one."""

    def receive(self, msg: WeightUpdate) -> dict[str, torch.Tensor] | None:
        """The state dict to load now (`msg` is final), or None (staged); ValueError for a
        bucket that does not fit, with nothing staged changed."""
        self._check_order(msg)
        tensors = self._tensors(msg)
        staged = self.staged if msg.version == self.version else {}
        if msg.version != self.version and self.staged:
            log.warning(
                "weights v%d: %d staged tensor(s) of v%d dropped (its push ended before its "
                "final bucket)",
                msg.version,
                len(self.staged),
                self.version,
            )
        repeated = sorted(staged.keys() & tensors.keys())
        if repeated:
            raise ValueError(
                f"weights v{msg.version} bucket {msg.bucket}: tensor(s) {repeated[:3]} already "
                "staged from an earlier bucket"
            )
        staged.update(tensors)
        self.version, self.next_bucket = msg.version, msg.bucket + 1
        if msg.final:
            self.staged = {}
            return staged
        self.staged = staged
        return None

    def _check_order(self, msg: WeightUpdate) -> None:
        where = f"weights v{msg.version} bucket {msg.bucket}"
        if msg.version < self.version:
            raise ValueError(f"{where}: older than v{self.version}, already received")
        expected = self.next_bucket if msg.version == self.version else 0
        if msg.bucket != expected:
            kind = "a duplicate" if msg.bucket < expected else "out of order"
            raise ValueError(f"{where}: {kind}, expected bucket {expected} of v{msg.version}")

    @staticmethod
    def _tensors(msg: WeightUpdate) -> dict[str, torch.Tensor]:
        where = f"weights v{msg.version} bucket {msg.bucket}"
        if len(msg.names) != len(msg.shapes):
            raise ValueError(f"{where}: {len(msg.names)} names but {len(msg.shapes)} shapes")
        if len(set(msg.names)) != len(msg.names):
            raise ValueError(f"{where}: a tensor name appears twice")
        try:
            return unflatten_weights(msg.names, msg.shapes, torch.from_numpy(msg.flat.copy()))
        except (ValueError, RuntimeError) as e:  # sizes that do not cover the buffer
            raise ValueError(f"{where}: {e}") from None
