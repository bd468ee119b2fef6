"""`rstar2.heap`: freezing collects first (no garbage is frozen), and thawing hands the objects
back to the collector."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from rstar2 import heap


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    yield
    gc.unfreeze()  # whatever a test left frozen


def test_freeze_collects_the_garbage_first_then_freezes_the_rest() -> None:
    kept, dropped = _Node(), _Node()
    dropped_ref = weakref.ref(dropped)
    del dropped
    assert dropped_ref() is not None  # a cycle outlives its last name
    frozen = heap.freeze()
    assert dropped_ref() is None  # collected, not frozen for good
    # Another thread (pytest-xdist's) may free frozen objects by their refcount at any time,
    # so the count can only have fallen since `freeze` read it.
    assert frozen >= gc.get_freeze_count() > 0
    assert not any(o is kept for o in gc.get_objects())  # collections skip it now
    assert kept.me is kept


def test_thaw_hands_the_frozen_objects_back_to_the_collector() -> None:
    node = _Node()
    node_ref = weakref.ref(node)
    heap.freeze()
    del node
    gc.collect()
    assert node_ref() is not None  # frozen garbage is never collected
    heap.thaw()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert node_ref() is None
