"""What the engine's fixed-shape steps share: padding sizes, and static buffers per shape whose
step is captured as a CUDA graph the first time it runs on CUDA and replayed after.

The decode (`decode_graphs.FixedDecoder`) and the short prefills (`prefill_graphs.FixedPrefill`)
pad a step's rows to buckets (`buckets`: powers of two and their midpoints) and keep one set of
static buffers per shape (`Graphed`). `ShapeGraphs` runs a shape's step over its filled
buffers: on CUDA, with graphs on, the first run captures it as a CUDA graph (`capture`: two
warm-up runs on a side stream, then the capture, with the buffers holding padding only), all
graphs of an engine in one memory pool, and later runs replay it; elsewhere, and for a shape
whose capture failed (a warning, counted in `stats()`), the step runs eagerly. A graph reads
the parameters and the KV cache where they are: a weight update must copy into them in place.

What it does not do: decide shapes or fill buffers (the subclasses do), or capture ahead of
time (a shape is captured when a step first needs it).
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from rstar2.engine.request import Request
from rstar2.engine.sampler import M32

log = logging.getLogger(__name__)

MIN_WIDTH_TOKENS = 64


def buckets(limit: int) -> list[int]:
    """Powers of two and their midpoints 1.5 x 2**k (1, 2, 3, 4, 6, 8, 12, 16, 24, ...) below
    `limit`, then `limit`: the sizes a count up to `limit` pads to. Each is at most 1.5x the
    one before, so padding is under a third of a padded size (under half with powers of two
    alone), at twice the number of shapes (CUDA graphs) to make."""
    sizes = []
    size = 1
    while size < limit:
        sizes.append(size)
        if size >= 2 and size + size // 2 < limit:
            sizes.append(size + size // 2)
        size *= 2
    return [*sizes, limit]


def bucket(n: int, sizes: list[int]) -> int:
    """The smallest of `sizes` (ascending) that holds `n`."""
    for size in sizes:
        if size >= n:
            return size
    raise ValueError(f"{n} exceeds the largest bucket {sizes[-1]}")


def width_buckets(max_model_len: int, block_size: int) -> list[int]:
    """The width buckets (KV blocks a row gathers) of a fixed-shape step: `buckets` of the
    blocks `max_model_len` needs, from `MIN_WIDTH_TOKENS` tokens on."""
    max_blocks = -(-max_model_len // block_size)
    sizes = [w for w in buckets(max_blocks) if w * block_size >= MIN_WIDTH_TOKENS]
    return sizes or [max_blocks]


def host_view(values: array, dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor over an `array`'s memory, no copy (the tensor keeps the array alive):
    buffers are filled from `array`s, which a comprehension fills in a C loop, about 4x
    faster than `torch.tensor` of a list."""
    return torch.frombuffer(values, dtype=dtype)


def sampling_inputs(rows: list[Request], seeds: list[int], pad: int) -> tuple[list[int], array]:
    """The per-row inputs of `sampler.sample_fixed` for `rows` and `pad` padding rows: the
    ints `[seed low halves, seed high halves, counters]` (the drawn token's index in its
    request's output; padding 0), row after row of each, and the float32 `array`
    `[temperatures, top-p]` (padding greedy, 0.0 and 1.0)."""
    zeros = [0] * pad
    ints = (
        [s & M32 for s in seeds]
        + zeros
        + [(s >> 32) & M32 for s in seeds]
        + zeros
        + [len(r.output_ids) for r in rows]
        + zeros
    )
    floats = array(
        "f",
        [r.params.temperature for r in rows]
        + [0.0] * pad
        + [r.params.top_p for r in rows]
        + [1.0] * pad,
    )
    return ints, floats


def block_table(rows: list[Request], width: int, pad_block: int) -> array:
    """The first `width` KV blocks of each of `rows`, padded with `pad_block`, row after row
    (int64 `array`, `[len(rows), width]` viewed)."""
    table: list[int] = []
    for r in rows:
        blocks = r.blocks[:width]
        table += blocks
        if len(blocks) < width:
            table += [pad_block] * (width - len(blocks))
    return array("q", table)


def keeps_nucleus(rows: list[Request]) -> bool:
    """Whether any sampled row restricts itself to a nucleus (the sort over the vocabulary)."""
    return any(r.params.temperature > 0.0 and r.params.top_p < 1.0 for r in rows)


def capture(
    inputs: list[torch.Tensor],
    blank: list[torch.Tensor],
    step: Callable[[], torch.Tensor],
    pool: tuple[int, int] | None,
    device: torch.device,
) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """Capture `step`, a function of the static tensors `inputs`, as a CUDA graph in `pool`:
    two warm-up runs on a side stream (as capture requires), then the capture, all with
    `inputs` holding `blank` (padding only: nothing but the scratch block is written);
    `inputs` hold their own values again after, whatever happens. The graph and its output."""
    saved = [t.clone() for t in inputs]
    for t, b in zip(inputs, blank, strict=True):
        t.copy_(b)
    try:
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                step()
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            out = step()
        return graph, out
    finally:
        for t, v in zip(inputs, saved, strict=True):
            t.copy_(v)


@dataclass(kw_only=True)
class Graphed:
    """A shape's run state; subclasses add its static input buffers (`ShapeGraphs.inputs`)."""

    out: torch.Tensor | None = None
    graph: torch.cuda.CUDAGraph | None = None
    eager: bool = False
    """Its capture failed: the shape runs eagerly."""


ShapeT = TypeVar("ShapeT")
BuffersT = TypeVar("BuffersT", bound=Graphed)


class ShapeGraphs(Generic[ShapeT, BuffersT]):
    """Static buffers per shape and their step, captured and replayed on CUDA. Subclasses
    define `allocate` (a shape's buffers, holding padding only), `inputs` (the buffers' input
    tensors, in a fixed order) and `step` (the computation over them)."""

    def __init__(
        self, device: torch.device, graphs: bool, pool: tuple[int, int] | None = None
    ) -> None:
        """`pool`: a CUDA graph memory pool to share (by default a new one on CUDA)."""
        self.device = device
        self.graphs = graphs and device.type == "cuda"
        self.pool = pool if pool is not None or not self.graphs else torch.cuda.graph_pool_handle()
        """The memory pool of this object's CUDA graphs."""
        self.capture_failures = 0
        self._buffers: dict[ShapeT, BuffersT] = {}

    def allocate(self, shape: ShapeT) -> BuffersT:
        raise NotImplementedError

    def inputs(self, buf: BuffersT) -> list[torch.Tensor]:
        raise NotImplementedError

    def step(self, buf: BuffersT, shape: ShapeT) -> torch.Tensor:
        raise NotImplementedError

    def buffers_for(self, shape: ShapeT) -> BuffersT:
        buf = self._buffers.get(shape)
        if buf is None:
            buf = self._buffers[shape] = self.allocate(shape)
        return buf

    def run(self, buf: BuffersT, shape: ShapeT) -> torch.Tensor:
        """One step over the filled buffers: captured the first time on CUDA, replayed after."""
        if buf.graph is None and self.graphs and not buf.eager:
            self._capture(buf, shape)
        if buf.graph is not None:
            buf.graph.replay()
        else:
            buf.out = self.step(buf, shape)
        assert buf.out is not None
        return buf.out

    def stats(self) -> dict[str, int]:
        return {
            "shapes": len(self._buffers),
            "graphs": sum(b.graph is not None for b in self._buffers.values()),
            "capture_failures": self.capture_failures,
        }

    def _capture(self, buf: BuffersT, shape: ShapeT) -> None:
        """Capture `shape`'s step as a CUDA graph; on failure the shape runs eagerly from then
        on, with a warning."""
        try:
            buf.graph, buf.out = capture(
                self.inputs(buf),
                self.inputs(self.allocate(shape)),
                lambda: self.step(buf, shape),
                self.pool,
                self.device,
            )
        except Exception as exc:  # noqa: BLE001 - any capture failure falls back to eager
            self.capture_failures += 1
            buf.eager = True
            log.warning("CUDA graph capture of %s failed (%s); that shape runs eagerly", shape, exc)
