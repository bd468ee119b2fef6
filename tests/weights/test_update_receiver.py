"""Bucket staging of a bus push (`UpdateReceiver`): what loads when, and the buckets it refuses."""

from __future__ import annotations

import numpy as np
import pytest

from rstar2.weights.update_receiver import UpdateReceiver
from rstar2.wire import WeightUpdate


def bucket(version: int, index: int, names: dict[str, float], final: bool = False) -> WeightUpdate:
    """A bucket of 2-value tensors, each filled with its value."""
    flat = np.concatenate([np.full(2, v, dtype=np.float32) for v in names.values()] or [[]])
    shapes = [[2] for _ in names]
    return WeightUpdate(version, list(names), shapes, flat.astype(np.float32), final, index)


def values(state: dict | None) -> dict[str, list[float]] | None:
    return None if state is None else {k: v.tolist() for k, v in state.items()}


def test_a_complete_set_gives_the_whole_state_dict_and_a_partial_one_none() -> None:
    r = UpdateReceiver()
    assert r.receive(bucket(3, 0, {"a": 1.0})) is None
    assert r.receive(bucket(3, 1, {"b": 2.0})) is None
    assert values(r.receive(bucket(3, 2, {}, final=True))) == {"a": [1.0, 1.0], "b": [2.0, 2.0]}
    assert r.staged == {}
    # the next version starts from nothing staged
    assert values(r.receive(bucket(4, 0, {"a": 5.0}, final=True))) == {"a": [5.0, 5.0]}


def test_synchronous_buckets_each_load_as_they_come() -> None:
    r = UpdateReceiver()
    assert values(r.receive(bucket(1, 0, {"a": 1.0}, final=True))) == {"a": [1.0, 1.0]}
    assert values(r.receive(bucket(1, 1, {"b": 2.0}, final=True))) == {"b": [2.0, 2.0]}


def test_the_tensors_do_not_share_the_messages_buffer() -> None:
    msg = bucket(1, 0, {"a": 1.0}, final=True)
    state = UpdateReceiver().receive(msg)
    assert state is not None
    msg.flat[:] = 9.0
    assert state["a"].tolist() == [1.0, 1.0]


def test_a_newer_version_drops_the_buckets_of_an_abandoned_push() -> None:
    r = UpdateReceiver()
    assert r.receive(bucket(3, 0, {"a": 1.0})) is None
    assert values(r.receive(bucket(4, 0, {"b": 2.0}, final=True))) == {"b": [2.0, 2.0]}


@pytest.mark.parametrize(
    ("second", "error"),
    [
        (bucket(3, 0, {"b": 2.0}), "bucket 0: a duplicate, expected bucket 1 of v3"),
        (bucket(3, 2, {"b": 2.0}), "bucket 2: out of order, expected bucket 1 of v3"),
        (bucket(4, 1, {"b": 2.0}), "v4 bucket 1: out of order, expected bucket 0 of v4"),
        (bucket(2, 0, {"b": 2.0}), "v2 bucket 0: older than v3"),
        (bucket(3, 1, {"a": 2.0}), r"tensor\(s\) \['a'\] already staged"),
    ],
    ids=["duplicate", "skipped", "new-version-midway", "older-version", "repeated-tensor"],
)
def test_a_bucket_that_does_not_fit_is_refused_and_the_staging_kept(
    second: WeightUpdate, error: str
) -> None:
    r = UpdateReceiver()
    assert r.receive(bucket(3, 0, {"a": 1.0})) is None
    with pytest.raises(ValueError, match=error):
        r.receive(second)
    # nothing changed: the push goes on where it was
    assert values(r.receive(bucket(3, 1, {"c": 3.0}, final=True))) == {
        "a": [1.0, 1.0],
        "c": [3.0, 3.0],
    }


def test_a_bucket_whose_header_does_not_match_its_buffer_is_refused() -> None:
    flat = np.zeros(3, dtype=np.float32)
    r = UpdateReceiver()
    with pytest.raises(ValueError, match="v1 bucket 0: weight buffer has 3 values"):
        r.receive(WeightUpdate(1, ["a"], [[2]], flat))
    with pytest.raises(ValueError, match="1 names but 2 shapes"):
        r.receive(WeightUpdate(1, ["a"], [[2], [1]], flat))
    with pytest.raises(ValueError, match="a tensor name appears twice"):
        r.receive(WeightUpdate(1, ["a", "a"], [[2], [1]], flat))
    with pytest.raises(ValueError, match="v1 bucket 0"):
        r.receive(WeightUpdate(1, ["a"], [[4]], flat))  # more values than the buffer holds
    assert r.version == -1  # nothing was taken
