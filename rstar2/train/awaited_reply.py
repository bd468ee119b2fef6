"""The controller's phase and the one command whose reply it awaits (`AwaitedReply`).

`expect(phase, command)` enters `phase` (a move `phase.TRANSITIONS` allows, else `ValueError`)
and awaits `command`'s reply; `take(kind, step)` accepts that reply and returns the phase it
came in, any other reply (another kind, another step, none awaited) is a `ValueError`: a bug in
the shell that fed it; `enter(phase)` moves on with nothing new awaited.

What it does not do: decide which phase or command comes next (`controller.py`).
"""

from __future__ import annotations

from typing import TypeVar

from rstar2.train.phase import Phase, check_transition
from rstar2.train.run_commands import PushWeights, RollOut, Update

Awaited = TypeVar("Awaited", PushWeights, RollOut, Update)


class AwaitedReply:
    """Where the controller is (`phase`) and what it waits for (`command`)."""

    def __init__(self) -> None:
        self.phase = Phase.START
        self.command: PushWeights | RollOut | Update | None = None
        """The command whose reply is awaited (None: none)."""

    def expect(self, phase: Phase, command: Awaited) -> Awaited:
        """Enter `phase` awaiting `command`'s reply; returns `command`."""
        self.enter(phase)
        self.command = command
        return command

    def enter(self, phase: Phase) -> None:
        check_transition(self.phase, phase)
        self.phase = phase

    def take(self, kind: type[PushWeights | RollOut | Update], step: int) -> Phase:
        """Accept the reply to the awaited command; anything else is a bug in the shell."""
        pending = self.command
        if not isinstance(pending, kind) or _step_of(pending) != step:
            wanted = f"{type(pending).__name__}({_step_of(pending)})" if pending else "nothing"
            raise ValueError(
                f"a reply to {kind.__name__}({step}) while the controller awaits {wanted}"
            )
        self.command = None
        return self.phase


def _step_of(command: PushWeights | RollOut | Update) -> int:
    return command.version if isinstance(command, PushWeights) else command.step
