"""The steps a GPU captures as CUDA graphs (`FixedDecoder.step`, `FixedPrefill.step`) dispatch
nothing a capture refuses: no host synchronisation (`.item()`, `.tolist()`, a tensor's truth
value), no shape that depends on the data (`nonzero`, boolean indexing, `masked_select`,
`unique`), and no tensor made from host data inside the step (`torch.tensor(list)`: an upload
the graph would replay with stale data, or refuse). On a GPU a failed capture falls back to
the eager step with a warning (`capture_failures`): correct, slow, and invisible to the CPU
tests unless something looks. Here the same steps run eagerly on the CPU while a dispatch
mode records every aten operation they call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rstar2.engine.decode_graphs import FixedDecoder
from rstar2.engine.mixed_step import mixed_step
from rstar2.engine.prefill_graphs import FixedPrefill
from rstar2.engine.protocol import SamplingParams
from tests.engine.factories import tiny_qwen2

REFUSED = {
    "_local_scalar_dense": "a host synchronisation (.item(), .tolist(), bool(tensor))",
    "nonzero": "a data-dependent shape",
    "masked_select": "a data-dependent shape",
    "_unique2": "a data-dependent shape",
    "unique_consecutive": "a data-dependent shape",
    "unique_dim": "a data-dependent shape",
    "lift_fresh": "a tensor made from host data",
    "lift_fresh_copy": "a tensor made from host data",
}


HOST_READS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__")
"""Tensor methods that read a value on the host. Under inference mode (the engine's steps)
`item()` and its kin reach no dispatch mode, so they are watched where Python calls them."""


class Refusals(TorchDispatchMode):
    """Records the operations of `REFUSED` (and boolean-mask indexing) dispatched under it,
    and the host reads of `HOST_READS`."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> Refusals:
        for name in HOST_READS:
            method = self._saved[name] = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, self._watch(name, method))
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        for name, method in self._saved.items():
            setattr(torch.Tensor, name, method)

    def _watch(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def read(tensor: torch.Tensor, *args: Any) -> Any:
            self.seen.append(f"{name}: a host synchronisation")
            return method(tensor, *args)

        return read

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if name in REFUSED:
            self.seen.append(f"{name}: {REFUSED[name]}")
        if name in ("index", "index_put", "index_put_"):
            masks = [i for i in args[1] if isinstance(i, torch.Tensor) and i.dtype == torch.bool]
            if masks:
                self.seen.append(f"{name} with a boolean mask: a data-dependent shape")
        return func(*args, **(kwargs or {}))


def recorded(graphs: Any, monkeypatch: pytest.MonkeyPatch) -> Refusals:
    """Run `graphs.step` (what `ShapeGraphs.run` captures on a GPU) under `Refusals`."""
    mode = Refusals()
    step: Callable[..., torch.Tensor] = graphs.step

    def watched(buf: Any, shape: Any) -> torch.Tensor:
        with mode:
            return step(buf, shape)

    monkeypatch.setattr(graphs, "step", watched)
    return mode


@pytest.mark.parametrize("greedy", [False, True], ids=["nucleus", "greedy"])
def test_the_decode_and_prefill_steps_a_gpu_captures_have_nothing_a_capture_refuses(
    monkeypatch: pytest.MonkeyPatch, greedy: bool
) -> None:
    model = tiny_qwen2()
    t, cache, batch = mixed_step(model)
    for req, _ in batch.requests:
        req.params = SamplingParams(4, temperature=0.0 if greedy else 0.8, top_p=0.9)
    prefill = FixedPrefill(t, cache, 8, 512, 32, graphs=False)
    rows = [(r, n) for r, n in batch.requests if prefill.takes(n)]
    prefills = recorded(prefill, monkeypatch)
    prefill.prefill(rows, list(range(len(rows))))
    decoder = FixedDecoder(t, cache, 8, 512, graphs=False)
    decodes = [r for r, n in batch.requests if n == 1]
    assert len(rows) == 6 and len(decodes) == 2
    steps = recorded(decoder, monkeypatch)
    decoder.decode(decodes, [3, 4])
    decoder.decode_round(decodes, [3, 4], [1, 1])
    assert prefills.seen == [] and steps.seen == []


def test_the_recorder_sees_what_a_capture_refuses() -> None:
    """The check above can fail: each kind of refused operation is recorded."""
    item = torch.Tensor.item
    x = torch.arange(6.0)
    with Refusals() as mode:
        x[x > 2]
        torch.tensor([1, 2, 3])
        x.nonzero()
        x + 1  # fine
    assert [s.split(":")[0] for s in mode.seen] == [
        "index with a boolean mask", "lift_fresh", "nonzero"
    ]  # fmt: skip
    with torch.inference_mode(), Refusals() as mode:  # as the engine's steps run
        int(x.max())
        float(x.sum())
        x.tolist()
        bool(x[0])
    assert [s.split(":")[0] for s in mode.seen] == ["__int__", "__float__", "tolist", "__bool__"]
    assert torch.Tensor.item is item and int(x.max()) == 5  # put back after
