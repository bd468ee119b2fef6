"""High-entropy tokens of tool-using trajectories: reflection or forking, and their aggregates.

rStar2-Agent's mechanism study looks at the tokens where the policy is least certain (the top
20% by entropy) and finds two kinds: *forking* tokens, which open the model's own exploration
and self-reflection, and *reflection* tokens, which come right after a tool response, where the
model reacts to the environment's feedback. This module computes that split, and the aggregates
`rstar2 analyze` reports, from per-token entropies (`rstar2.analysis.token_entropy`).

Definitions (per trajectory; `loss_mask` 1 on sampled tokens, 0 on prompt and forced tokens):

- a *generated* token: a position with mask 1; only these are analysed;
- a *tool-response end*: the last position of a run of mask-0 tokens that follows a generated
  token (the leading run is the prompt, not a response). After `</tool_call>` the agent loop
  forces `<|im_end|> ... <tool_response> OUTPUT </tool_response><|im_end|>\\n<|im_start|>
  assistant\\n` (docs/format.md), so this is where the model's next turn begins. Found from
  the mask alone, so it holds for any tokenizer;
- the *distance* d of a generated token: the number of generated tokens between the last
  tool-response end before it and itself (d = 0 for the first token written after a tool
  response); None before the first tool response;
- the *high-entropy* tokens: the k = ceil(top * N) generated tokens of highest entropy among
  all N of all trajectories (ties: the earlier trajectory, then the earlier position, first);
- a *reflection* token: a high-entropy token with d < window; a *forking* token: any other.

The shares alone would mislead where the window holds many of the tokens, so `analyze` also
reports the window's share of all generated tokens (`window_token_fraction`): reflection
tokens are over-represented when `reflection_fraction` exceeds it.

What it does not do: run a model (token_entropy.py), read files (trajectory_file.py) or draw
(plots.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

NO_RESPONSE = -1
"""`TokenTable.distance` of a token written before any tool response."""


def generated_positions(loss_mask: Sequence[int]) -> list[int]:
    """Positions of the generated (mask 1) tokens, in order."""
    return [t for t, bit in enumerate(loss_mask) if bit]


def tool_response_distances(loss_mask: Sequence[int]) -> list[int | None]:
    """The distance of each generated token from the last tool-response end before it (see
    the module docstring), in the order of `generated_positions`."""
    out: list[int | None] = []
    last_end: int | None = None  # position of the last tool-response end seen
    seen_generated = False
    for t, bit in enumerate(loss_mask):
        if bit:
            if t > 0 and not loss_mask[t - 1] and seen_generated:
                last_end = t - 1
            out.append(None if last_end is None else t - last_end - 1)
            seen_generated = True
    return out


@dataclass(frozen=True)
class TokenTable:
    """Every generated token of a set of trajectories, as flat arrays of one length."""

    trajectory: np.ndarray
    """Index of the token's trajectory."""
    position: np.ndarray
    """The token's position in its trajectory."""
    token_id: np.ndarray
    distance: np.ndarray
    """Distance from the last tool response (`NO_RESPONSE`: none before it)."""
    entropy: np.ndarray
    """The policy's entropy (nats) over the vocabulary where it chose this token."""

    def __len__(self) -> int:
        return len(self.entropy)


def token_table(
    masks: Sequence[Sequence[int]],
    token_ids: Sequence[Sequence[int]],
    entropies: Sequence[Sequence[float]],
) -> TokenTable:
    """The generated tokens of trajectories given by their loss masks, token ids and
    per-position entropies (each of one trajectory's three lists as long as its tokens)."""
    traj, pos, ids, dist, ent = [], [], [], [], []
    for i, (mask, tokens, entropy) in enumerate(zip(masks, token_ids, entropies, strict=True)):
        if not len(mask) == len(tokens) == len(entropy):
            raise ValueError(
                f"trajectory {i}: {len(tokens)} tokens, {len(mask)} mask bits, "
                f"{len(entropy)} entropies"
            )
        positions = generated_positions(mask)
        distances = tool_response_distances(mask)
        traj += [i] * len(positions)
        pos += positions
        ids += [tokens[t] for t in positions]
        dist += [NO_RESPONSE if d is None else d for d in distances]
        ent += [entropy[t] for t in positions]
    return TokenTable(
        np.asarray(traj, dtype=np.int64),
        np.asarray(pos, dtype=np.int64),
        np.asarray(ids, dtype=np.int64),
        np.asarray(dist, dtype=np.int64),
        np.asarray(ent, dtype=np.float64),
    )


def high_entropy_mask(entropy: np.ndarray, top: float) -> np.ndarray:
    """True on the k = ceil(top * N) highest entropies (ties: earlier index first)."""
    if not 0 < top <= 1:
        raise ValueError(f"top must be in (0, 1], got {top}")
    k = math.ceil(top * len(entropy))
    chosen = np.zeros(len(entropy), dtype=bool)
    chosen[np.argsort(-entropy, kind="stable")[:k]] = True
    return chosen


def reflection_mask(distance: np.ndarray, window: int) -> np.ndarray:
    """True on tokens within `window` generated tokens after a tool response."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    return (distance != NO_RESPONSE) & (distance < window)


@dataclass(frozen=True)
class Settings:
    """What `analyze` counts as high-entropy and as reflection, and how much it lists."""

    top: float = 0.2
    """Fraction of generated tokens, by entropy, that are high-entropy."""
    window: int = 8
    """A high-entropy token fewer than this many generated tokens after a tool response is a
    reflection token."""
    max_distance: int = 64
    """`entropy_by_distance` lists distances 0 .. max_distance - 1."""
    top_tokens: int = 15
    """How many of the most frequent high-entropy tokens of each kind to list."""


def analyze(
    table: TokenTable, settings: Settings, decode: Callable[[int], str]
) -> dict[str, object]:
    """The report of one model's entropies (the keys of `analysis.json`): `tokens`,
    `high_entropy_tokens`, `reflection_fraction`, `forking_fraction`, `top_reflection_tokens`,
    `top_forking_tokens`, `entropy_by_distance`, and beside them the entropy threshold, mean
    entropies and the window's share of all tokens. `decode` gives one token id's text."""
    if not len(table):
        raise ValueError("no generated tokens to analyse")
    high = high_entropy_mask(table.entropy, settings.top)
    in_window = reflection_mask(table.distance, settings.window)
    k = int(high.sum())
    reflection, forking = high & in_window, high & ~in_window
    return {
        "tokens": len(table),
        "high_entropy_tokens": k,
        "entropy_threshold": float(table.entropy[high].min()),
        "mean_entropy": float(table.entropy.mean()),
        "reflection_fraction": int(reflection.sum()) / k,
        "forking_fraction": int(forking.sum()) / k,
        "window_token_fraction": float(in_window.mean()),
        "mean_entropy_in_window": _mean(table.entropy[in_window]),
        "mean_entropy_outside_window": _mean(table.entropy[~in_window]),
        "top_reflection_tokens": top_tokens(table.token_id[reflection], decode, settings.top_tokens),
        "top_forking_tokens": top_tokens(table.token_id[forking], decode, settings.top_tokens),
        "entropy_by_distance": entropy_by_distance(table, settings.max_distance),
        "entropy_before_tool_response": _bucket(table.entropy[table.distance == NO_RESPONSE]),
        "entropy_beyond_max_distance": _bucket(table.entropy[table.distance >= settings.max_distance]),
    }  # fmt: skip


def top_tokens(
    token_ids: np.ndarray, decode: Callable[[int], str], n: int
) -> list[dict[str, object]]:
    """The `n` most frequent texts among `token_ids` (a token's text with its surrounding
    whitespace stripped, so " but" and "but" are one entry; a whitespace-only token is kept as
    it is), each with its count and its share of these tokens. Ties: the text first seen."""
    counts = Counter(_text_key(decode(int(i))) for i in token_ids)
    total = len(token_ids)
    return [
        {"text": text, "count": count, "share": count / total}
        for text, count in counts.most_common(n)
    ]


def entropy_by_distance(table: TokenTable, max_distance: int) -> list[dict[str, object]]:
    """Mean entropy of the tokens at each distance 0 .. max_distance - 1 from the last tool
    response (distances no token has are left out)."""
    out = []
    for d in range(max_distance):
        values = table.entropy[table.distance == d]
        if len(values):
            out.append({"distance": d, **_bucket(values)})
    return out


def compare(
    table_a: TokenTable,
    table_b: TokenTable,
    report_a: dict[str, object],
    report_b: dict[str, object],
    top: float,
) -> dict[str, object]:
    """How model B's report differs from model A's on the same tokens: B - A of the shares and
    mean entropies, per distance, and `high_entropy_overlap`, the share of A's high-entropy
    tokens that are high-entropy under B too."""
    if not np.array_equal(table_a.token_id, table_b.token_id) or not np.array_equal(
        table_a.distance, table_b.distance
    ):
        raise ValueError("the two tables do not hold the same tokens")
    high_a = high_entropy_mask(table_a.entropy, top)
    high_b = high_entropy_mask(table_b.entropy, top)
    keys = (
        "mean_entropy",
        "entropy_threshold",
        "reflection_fraction",
        "forking_fraction",
        "mean_entropy_in_window",
        "mean_entropy_outside_window",
    )
    change: dict[str, object] = {key: _difference(report_a[key], report_b[key]) for key in keys}
    change["high_entropy_overlap"] = int((high_a & high_b).sum()) / int(high_a.sum())
    by_a = {row["distance"]: row["mean_entropy"] for row in report_a["entropy_by_distance"]}  # type: ignore[attr-defined]
    change["entropy_by_distance"] = [
        {"distance": row["distance"], "mean_entropy": row["mean_entropy"] - by_a[row["distance"]]}
        for row in report_b["entropy_by_distance"]  # type: ignore[attr-defined]
    ]
    return change


def _difference(a: object, b: object) -> float | None:
    if a is None or b is None:
        return None
    return float(b) - float(a)  # type: ignore[arg-type]


def _text_key(text: str) -> str:
    return text.strip() or text


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) else None


def _bucket(values: np.ndarray) -> dict[str, object]:
    return {"tokens": len(values), "mean_entropy": _mean(values)}
