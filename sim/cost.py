"""Engine cost model: how long one continuous-batching step takes, from roofline presets.

A step that decodes one token for each of ``batch`` running sequences holding ``context`` KV
tokens in all, and prefills ``prefill`` new tokens, is modelled as affine in those three:

    step_s = a + b * batch + c * context + p * prefill

The roofline gives the coefficients for a (model, GPU, tensor-parallel degree) preset, because
decode is memory-bound (every step streams the weights once and every resident KV token once)
while the per-token matmul work and prefill are compute-bound:

    a = launch_overhead + weight_bytes / (tp * bandwidth * bw_efficiency)
    b = 2 * params / (tp * peak_flops * decode_mfu)
    c = kv_bytes_per_token / (tp * bandwidth * bw_efficiency)
    p = 2 * params / (tp * peak_flops * prefill_mfu)

(the true roofline is a max of compute and memory time; the sum over-estimates the overlap by
at most 2x at the knee, and `fit` replaces the guesses by measured coefficients anyway). The KV
pool of one engine is ``tp * memory * gpu_memory_utilization - weight_bytes - tp * overhead``.

`fit(points)` calibrates a, b, c, p by least squares (with non-negativity) from measured steps.
What it does not model: attention FLOPs of long prefills, tensor-parallel communication,
chunked-prefill token budgets, CUDA graphs' batch-size buckets.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: float
    bandwidth_bytes_s: float
    peak_flops: float


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    kv_heads: int
    head_dim: int
    params: float

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer, every KV head, bf16 (2 bytes)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    @property
    def weight_bytes(self) -> float:
        return 2.0 * self.params


GPUS: dict[str, GpuSpec] = {
    "mi300x": GpuSpec("mi300x", 192e9, 5.3e12, 1307e12),
    "h100": GpuSpec("h100", 80e9, 3.35e12, 989e12),
    "h200": GpuSpec("h200", 141e9, 4.8e12, 989e12),
}

MODELS: dict[str, ModelSpec] = {
    "qwen3-14b": ModelSpec("qwen3-14b", layers=40, kv_heads=8, head_dim=128, params=14.8e9),
    "qwen2.5-32b": ModelSpec("qwen2.5-32b", layers=64, kv_heads=8, head_dim=128, params=32.5e9),
}


@dataclass(frozen=True)
class CostModel:
    """Coefficients of ``step_s = a + b*batch + c*context + p*prefill`` (seconds)."""

    step_overhead_s: float
    """a: fixed time of a step (launch overhead plus streaming the weights once)."""
    per_seq_s: float
    """b: time per sequence in the batch (its token's matmuls)."""
    per_context_token_s: float
    """c: time per resident KV token (attention reads it once per step)."""
    per_prefill_token_s: float
    """p: time per prefilled token."""

    def __post_init__(self) -> None:
        if not self.step_overhead_s > 0:
            raise ValueError(f"step_overhead_s must be > 0, got {self.step_overhead_s}")
        for name in ("per_seq_s", "per_context_token_s", "per_prefill_token_s"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")

    def step_s(self, batch: int, context: int, prefill: int = 0) -> float:
        return (
            self.step_overhead_s
            + self.per_seq_s * batch
            + self.per_context_token_s * context
            + self.per_prefill_token_s * prefill
        )


def constant_cost(step_s: float) -> CostModel:
    """Every decode step takes `step_s`; prefill is free (the hand-solvable `--cost constant`)."""
    return CostModel(step_s, 0.0, 0.0, 0.0)


def roofline(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int = 1,
    bw_efficiency: float = 0.8,
    decode_mfu: float = 0.5,
    prefill_mfu: float = 0.4,
    launch_overhead_s: float = 0.002,
) -> CostModel:
    """The roofline coefficients for one engine of `tp` GPUs (see the module docstring)."""
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    bandwidth = tp * gpu.bandwidth_bytes_s * bw_efficiency
    return CostModel(
        step_overhead_s=launch_overhead_s + model.weight_bytes / bandwidth,
        per_seq_s=2 * model.params / (tp * gpu.peak_flops * decode_mfu),
        per_context_token_s=model.kv_bytes_per_token / bandwidth,
        per_prefill_token_s=2 * model.params / (tp * gpu.peak_flops * prefill_mfu),
    )


def kv_capacity_tokens(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int = 1,
    gpu_memory_utilization: float = 0.9,
    overhead_bytes: float = 2e9,
) -> int:
    """KV tokens one engine can hold (0 when the weights do not fit)."""
    pool = tp * (gpu.memory_bytes * gpu_memory_utilization - overhead_bytes) - model.weight_bytes
    return max(0, int(pool // model.kv_bytes_per_token))


def auto_tp(model: ModelSpec, gpu: GpuSpec, gpus: int, min_tokens: int) -> int:
    """Smallest tensor-parallel degree (dividing `gpus`) whose KV pool holds `min_tokens`."""
    for tp in (1, 2, 4, 8):
        if gpus % tp == 0 and kv_capacity_tokens(model, gpu, tp) >= min_tokens:
            return tp
    raise ValueError(
        f"{model.name} on {gpus} x {gpu.name}: no tensor-parallel degree gives {min_tokens} KV tokens"
    )


@dataclass(frozen=True)
class StepPoint:
    """One measured engine step."""

    batch: int
    context_tokens: int
    prefill_tokens: int
    step_s: float


def load_points(path: str | Path) -> list[StepPoint]:
    """Measured steps from JSON (a list of objects) or CSV (a header row), with the fields
    batch, context_tokens, prefill_tokens (optional, default 0) and step_s."""
    path = Path(path)
    text = path.read_text()
    if path.suffix == ".json":
        rows = json.loads(text)
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a JSON list of step objects")
    elif path.suffix == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
    else:
        raise ValueError(f"{path}: expected a .json or .csv file")
    points = []
    for i, row in enumerate(rows):
        try:
            points.append(
                StepPoint(
                    batch=int(row["batch"]),
                    context_tokens=int(row["context_tokens"]),
                    prefill_tokens=int(row.get("prefill_tokens", 0) or 0),
                    step_s=float(row["step_s"]),
                )
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: row {i} is not a step point ({e!r})") from None
    return points


def fit(points: list[StepPoint]) -> CostModel:
    """Least-squares coefficients for measured steps, none negative.

    Minimises sum (a + b*batch + c*context + p*prefill - step_s)^2. A coefficient that comes out
    negative is pinned to 0 and the rest refitted (a small active-set method), because a negative
    cost would let the simulator run faster by adding work.
    """
    if len(points) < 2:
        raise ValueError(f"need at least 2 measured points, got {len(points)}")
    x = np.array(
        [[1.0, p.batch, p.context_tokens, p.prefill_tokens] for p in points], dtype=np.float64
    )
    y = np.array([p.step_s for p in points], dtype=np.float64)
    active = [0, 1, 2, 3]
    coef = np.zeros(4)
    while active:
        sol, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        coef = np.zeros(4)
        coef[active] = sol
        negative = [i for i in active if coef[i] < 0 and i != 0]
        if not negative:
            break
        active.remove(min(negative, key=lambda i: coef[i]))
    a = max(float(coef[0]), 1e-9)
    return CostModel(a, float(coef[1]), float(coef[2]), float(coef[3]))
