"""The weight gate: updates load at turn boundaries, turns are tagged with their version."""

from __future__ import annotations

import anyio
import pytest

from rstar2.rollout.weight_gate import UNKNOWN_VERSION, WeightGate

pytestmark = pytest.mark.anyio


async def test_a_turn_is_tagged_with_the_version_loaded_before_it() -> None:
    gate = WeightGate()
    async with gate.turn() as version:
        assert version == UNKNOWN_VERSION

    async def load() -> None:
        pass

    await gate.update(3, load)
    async with gate.turn() as version:
        assert version == 3
    assert gate.version == 3


async def test_an_update_waits_for_the_turns_in_flight_and_holds_new_ones() -> None:
    gate = WeightGate(version=0)
    events: list[str] = []
    turn_started = anyio.Event()
    finish_turn = anyio.Event()

    async def old_turn() -> None:
        async with gate.turn() as version:
            events.append(f"old turn starts v{version}")
            turn_started.set()
            await finish_turn.wait()
            events.append("old turn ends")

    async def load() -> None:
        events.append("load")

    async def new_turn() -> None:
        async with gate.turn() as version:
            events.append(f"new turn v{version}")

    with anyio.fail_after(5):  # a gate that never wakes a waiter fails, not hangs
        async with anyio.create_task_group() as tg:
            tg.start_soon(old_turn)
            await turn_started.wait()
            tg.start_soon(gate.update, 1, load)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(new_turn)  # arrives while the update waits: held back
            await anyio.wait_all_tasks_blocked()
            assert events == ["old turn starts v0"]
            finish_turn.set()
    assert events == ["old turn starts v0", "old turn ends", "load", "new turn v1"]


async def test_a_failed_load_keeps_the_old_version_and_reopens_the_gate() -> None:
    gate = WeightGate(version=4)

    async def broken() -> None:
        raise ValueError("unknown parameter")

    with pytest.raises(ValueError, match="unknown parameter"):
        await gate.update(5, broken)
    assert gate.version == 4
    with anyio.fail_after(1):
        async with gate.turn() as version:
            assert version == 4


async def test_updates_load_one_at_a_time_in_order() -> None:
    gate = WeightGate(version=0)
    loading: list[int] = []

    def loader(v: int):  # noqa: ANN202
        async def load() -> None:
            loading.append(v)
            await anyio.sleep(0.01)
            loading.append(-v)

        return load

    with anyio.fail_after(5):  # a gate that never wakes a waiter fails, not hangs
        async with anyio.create_task_group() as tg:
            tg.start_soon(gate.update, 1, loader(1))
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(gate.update, 2, loader(2))
    assert loading == [1, -1, 2, -2]
    assert gate.version == 2


async def test_a_turn_with_no_update_pending_neither_waits_nor_yields() -> None:
    """The fast path every turn of synchronous RL takes: no lock and no checkpoint (a task
    started beforehand has not run when the turn has entered and left)."""
    gate = WeightGate(version=2)
    ran: list[str] = []

    async def other() -> None:
        ran.append("other task")

    with anyio.fail_after(5):  # bounded like the others, though nothing here waits
        async with anyio.create_task_group() as tg:
            tg.start_soon(other)
            async with gate.turn() as version:
                assert version == 2
            assert ran == []
    assert ran == ["other task"]


async def test_an_update_cancelled_while_turns_run_reopens_the_gate() -> None:
    gate = WeightGate(version=0)
    finish_turn = anyio.Event()
    versions: list[int] = []

    async def old_turn() -> None:
        async with gate.turn():
            await finish_turn.wait()

    async def new_turn() -> None:
        async with gate.turn() as version:
            versions.append(version)

    async def never() -> None:
        raise AssertionError("the load ran")

    with anyio.fail_after(5):  # a gate that never wakes a waiter fails, not hangs
        async with anyio.create_task_group() as tg:
            tg.start_soon(old_turn)
            await anyio.wait_all_tasks_blocked()
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as inner:
                    inner.start_soon(gate.update, 1, never)
                    await anyio.wait_all_tasks_blocked()
                    tg.start_soon(new_turn)  # held back by the waiting update
                    await anyio.wait_all_tasks_blocked()
                    assert versions == []
                    scope.cancel()
            with anyio.fail_after(1):
                while not versions:
                    await anyio.sleep(0.01)
            finish_turn.set()
    assert versions == [0] and gate.version == 0
