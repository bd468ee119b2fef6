"""`shape_graphs.ShapeGraphs`: static buffers per shape, a step run over them, and the fallback
when a CUDA graph capture fails (forced here on the CPU, where capture cannot work)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rstar2.engine.shape_graphs import Graphed, ShapeGraphs


@dataclass
class _Doubles(Graphed):
    values: torch.Tensor


class _Doubler(ShapeGraphs[int, _Doubles]):
    """Doubles a buffer of `shape` values; padding is zeros."""

    def allocate(self, shape: int) -> _Doubles:
        return _Doubles(torch.zeros(shape))

    def inputs(self, buf: _Doubles) -> list[torch.Tensor]:
        return [buf.values]

    def step(self, buf: _Doubles, shape: int) -> torch.Tensor:
        return buf.values * 2


def test_one_buffer_set_per_shape_and_the_step_runs_over_it() -> None:
    doubler = _Doubler(torch.device("cpu"), graphs=True)
    assert not doubler.graphs  # no CUDA graphs on the CPU: the step runs eagerly
    buf = doubler.buffers_for(3)
    assert doubler.buffers_for(3) is buf and doubler.buffers_for(4) is not buf
    buf.values.copy_(torch.tensor([1.0, 2.0, 3.0]))
    assert doubler.run(buf, 3).tolist() == [2.0, 4.0, 6.0]
    assert doubler.stats() == {"shapes": 2, "graphs": 0, "capture_failures": 0}


def test_a_failed_capture_leaves_the_shape_eager_with_its_inputs_intact() -> None:
    doubler = _Doubler(torch.device("cpu"), graphs=True)
    doubler.graphs = True  # as on CUDA: the first run captures (which fails on the CPU)
    buf = doubler.buffers_for(2)
    buf.values.copy_(torch.tensor([5.0, 7.0]))
    assert doubler.run(buf, 2).tolist() == [10.0, 14.0]  # the real inputs, not the padding
    assert buf.eager and buf.graph is None and doubler.capture_failures == 1
    buf.values.copy_(torch.tensor([1.0, 1.0]))
    assert doubler.run(buf, 2).tolist() == [2.0, 2.0]  # eager from then on: no new attempt
    assert doubler.stats() == {"shapes": 1, "graphs": 0, "capture_failures": 1}
