"""Entropy by teacher forcing and the reflection / forking split, on a hand-made model whose
next-token distribution is known exactly: the logits at a position depend only on the token
there (a fixed table), so every entropy and logprob below is computed by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rstar2.analysis import (
    NO_RESPONSE,
    Settings,
    TokenTable,
    analyze,
    compare,
    entropy_from_logits,
    high_entropy_mask,
    length_batches,
    load_trajectories,
    logprob_gap,
    teacher_force,
    token_table,
    tool_response_distances,
)

INF = float("inf")
# next-token distribution after each token of a 4-token vocabulary
NEXT = {
    0: [0.25, 0.25, 0.25, 0.25],  # H = ln 4
    1: [0.5, 0.25, 0.25, 0.0],  # H = 1.5 ln 2
    2: [1.0, 0.0, 0.0, 0.0],  # H = 0
    3: [0.9, 0.1, 0.0, 0.0],  # H = -(0.9 ln 0.9 + 0.1 ln 0.1)
}
H = {
    0: math.log(4),
    1: 1.5 * math.log(2),
    2: 0.0,
    3: -(0.9 * math.log(0.9) + 0.1 * math.log(0.1)),
}
TEXT = {0: " wait", 1: "but ", 2: "\n", 3: "print"}


class FixedLogits(torch.nn.Module):
    """logits[b, t] = log NEXT[input_ids[b, t]] (or `table` when given): a causal LM whose
    distribution after each token is known."""

    def __init__(self, table: dict[int, list[float]] = NEXT) -> None:
        super().__init__()
        rows = [[math.log(p) if p > 0 else -INF for p in table[i]] for i in sorted(table)]
        self.table = torch.tensor(rows)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> SimpleNamespace:
        return SimpleNamespace(logits=self.table[input_ids])


def test_entropy_from_logits_is_exact_with_zero_probabilities() -> None:
    logits = FixedLogits().table
    expected = torch.tensor([H[i] for i in range(4)], dtype=torch.float32)
    assert torch.allclose(entropy_from_logits(logits), expected, atol=1e-6)


def test_teacher_force_gives_each_positions_entropy_and_logprob() -> None:
    seqs = [[3, 0, 1, 1, 0], [2, 0], [1, 2, 0, 3]]
    for budget in (1, 8, 1000):  # one per batch, padded pairs, all in one batch
        scores = teacher_force(FixedLogits(), seqs, batch_tokens=budget)
        for seq, s in zip(seqs, scores, strict=True):
            assert len(s.entropy) == len(s.logprob) == len(seq)
            assert math.isnan(s.entropy[0]) and math.isnan(s.logprob[0])
            for t in range(1, len(seq)):
                assert s.entropy[t] == pytest.approx(H[seq[t - 1]], abs=1e-6)
                assert s.logprob[t] == pytest.approx(math.log(NEXT[seq[t - 1]][seq[t]]), abs=1e-6)


def test_teacher_force_on_a_real_causal_lm_does_not_depend_on_the_padding() -> None:
    """Right padding with an attention mask: a sequence batched with longer ones scores as
    it does alone (a tiny random Qwen2, the embedded model's architecture)."""
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)  # fmt: skip
    model = Qwen2ForCausalLM(cfg).eval()
    seqs = [[1, 5, 7, 9, 2, 4, 6, 8, 3], [3, 4], [10, 11, 12, 13, 14]]
    alone = teacher_force(model, seqs, batch_tokens=1)
    batched = teacher_force(model, seqs, batch_tokens=1000)
    assert len(length_batches([len(s) for s in seqs], 1000)) == 1
    for a, b in zip(alone, batched, strict=True):
        assert np.allclose(a.entropy[1:], b.entropy[1:], atol=1e-5)
        assert np.allclose(a.logprob[1:], b.logprob[1:], atol=1e-5)
    assert max(max(s.entropy[1:]) for s in alone) > 0.1  # not a degenerate model


def test_length_batches_pack_longest_first_under_the_budget() -> None:
    assert length_batches([3, 10, 4, 2, 9], 20) == [[1, 4], [2, 0, 3]]  # 10 x 2 fits
    assert length_batches([3, 10, 4, 2, 9], 19) == [[1], [4, 2], [0, 3]]
    assert length_batches([30, 2], 8) == [[0], [1]]  # over the budget alone
    assert length_batches([2, 2, 2, 2, 2], 6) == [[0, 1, 2], [3, 4]]


def test_tool_response_distances() -> None:
    # prompt | turn 1 (3 tokens) | tool response | turn 2 (2) | response | turn 3 (1)
    mask = [0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 1]
    assert tool_response_distances(mask) == [None, None, None, 0, 1, 0]
    assert tool_response_distances([0, 1, 1]) == [None, None]
    assert tool_response_distances([0, 1, 0, 0]) == [None]  # a response cut by the budget


# One trajectory, its generated tokens with their (known) entropies and distances:
#   prompt 2,           turn 1: 1 0 3 (tool call),  tool response: 2 2,  turn 2: 0 1 2
# token    at  predicted after  entropy   distance
#   1       1       2           0          None
#   0       2       1           1.5 ln 2   None
#   3       3       0           ln 4       None
#   0       6       2           0          0
#   1       7       0           ln 4       1
#   2       8       1           1.5 ln 2   2
TOKENS = [2, 1, 0, 3, 2, 2, 0, 1, 2]
MASK = [0, 1, 1, 1, 0, 0, 1, 1, 1]


def scored_table(model: torch.nn.Module | None = None) -> TokenTable:
    (scores,) = teacher_force(model or FixedLogits(), [TOKENS])
    return token_table([MASK], [TOKENS], [scores.entropy])


def test_token_table_holds_the_generated_tokens_with_entropy_and_distance() -> None:
    table = scored_table()
    assert table.position.tolist() == [1, 2, 3, 6, 7, 8]
    assert table.token_id.tolist() == [1, 0, 3, 0, 1, 2]
    assert table.distance.tolist() == [NO_RESPONSE] * 3 + [0, 1, 2]
    expected = [0, 1.5 * math.log(2), math.log(4), 0, math.log(4), 1.5 * math.log(2)]
    assert np.allclose(table.entropy, expected, atol=1e-6)


def test_analyze_splits_the_top_tokens_into_reflection_and_forking() -> None:
    table = scored_table()
    # top 0.5 of 6 tokens: the 3 highest, ln 4 (token 3 at position 3, token 1 at 7) and the
    # first 1.5 ln 2 by the tie rule (token 0 at position 2); window 2: distances 0 and 1
    report = analyze(table, Settings(top=0.5, window=2, max_distance=3), TEXT.__getitem__)
    assert report["tokens"] == 6 and report["high_entropy_tokens"] == 3
    assert report["entropy_threshold"] == pytest.approx(1.5 * math.log(2), abs=1e-6)
    assert report["reflection_fraction"] == pytest.approx(1 / 3)  # token 1 at distance 1
    assert report["forking_fraction"] == pytest.approx(2 / 3)
    assert report["window_token_fraction"] == pytest.approx(2 / 6)
    assert report["top_reflection_tokens"] == [{"text": "but", "count": 1, "share": 1.0}]
    assert report["top_forking_tokens"] == [
        {"text": "wait", "count": 1, "share": 0.5},
        {"text": "print", "count": 1, "share": 0.5},
    ]
    by_distance = {r["distance"]: r for r in report["entropy_by_distance"]}
    assert sorted(by_distance) == [0, 1, 2]
    assert by_distance[0]["mean_entropy"] == pytest.approx(0.0, abs=1e-6)
    assert by_distance[1]["mean_entropy"] == pytest.approx(math.log(4), abs=1e-6)
    assert by_distance[2]["tokens"] == 1
    before = report["entropy_before_tool_response"]
    assert before["tokens"] == 3
    assert before["mean_entropy"] == pytest.approx((1.5 * math.log(2) + math.log(4)) / 3)
    assert report["mean_entropy_in_window"] == pytest.approx(math.log(4) / 2, abs=1e-6)
    # window 3 takes distance 2 in too: the 1.5 ln 2 at position 8 is not high (tie rule)
    wider = analyze(table, Settings(top=0.5, window=3), TEXT.__getitem__)
    assert wider["reflection_fraction"] == pytest.approx(1 / 3)
    # everything high: 3 of 6 after a response, 2 of them within window 2
    everything = analyze(table, Settings(top=1.0, window=2), TEXT.__getitem__)
    assert everything["high_entropy_tokens"] == 6
    assert everything["reflection_fraction"] == pytest.approx(2 / 6)
    # max_distance cuts the list; the rest is one bucket
    cut = analyze(table, Settings(top=0.5, window=2, max_distance=1), TEXT.__getitem__)
    assert [r["distance"] for r in cut["entropy_by_distance"]] == [0]
    assert cut["entropy_beyond_max_distance"]["tokens"] == 2


def test_high_entropy_mask_takes_the_ceiling_and_breaks_ties_by_order() -> None:
    entropy = np.array([1.0, 2.0, 1.0, 0.5, 1.0])
    assert high_entropy_mask(entropy, 0.2).tolist() == [False, True, False, False, False]
    assert high_entropy_mask(entropy, 0.3).tolist() == [True, True, False, False, False]
    assert high_entropy_mask(entropy, 0.6).tolist() == [True, True, True, False, False]
    with pytest.raises(ValueError, match="top"):
        high_entropy_mask(entropy, 0.0)


def test_compare_two_models_on_the_same_tokens() -> None:
    # model B: sure after token 1 (H 0), uniform after token 2 (H ln 4)
    other = dict(NEXT)
    other[1], other[2] = [1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]
    a, b = scored_table(), scored_table(FixedLogits(other))
    # B's entropies by position 1, 2, 3, 6, 7, 8: ln 4, 0, ln 4, ln 4, ln 4, 0
    settings = Settings(top=0.5, window=2)
    ra, rb = (analyze(t, settings, TEXT.__getitem__) for t in (a, b))
    change = compare(a, b, ra, rb, top=0.5)
    # B's top 3: positions 1, 3, 6 (ln 4, the tie rule); A's: 2, 3, 7: one in common
    assert change["high_entropy_overlap"] == pytest.approx(1 / 3)
    assert rb["reflection_fraction"] == pytest.approx(1 / 3)  # position 6, distance 0
    assert change["reflection_fraction"] == pytest.approx(0.0)
    assert change["mean_entropy"] == pytest.approx(
        (4 * math.log(4) - 2 * math.log(4) - 3 * math.log(2)) / 6, abs=1e-6
    )
    by_distance = {r["distance"]: r["mean_entropy"] for r in change["entropy_by_distance"]}
    assert by_distance[0] == pytest.approx(math.log(4), abs=1e-6)
    assert by_distance[2] == pytest.approx(-1.5 * math.log(2), abs=1e-6)
    assert compare(a, a, ra, ra, top=0.5)["high_entropy_overlap"] == 1.0


def test_logprob_gap_counts_generated_tokens_only() -> None:
    masks = [[0, 1, 1], [0, 0, 1]]
    recorded = [[0.0, -1.0, -2.0], [0.0, 0.0, -0.5]]
    forced = [[9.0, -1.5, -2.0], [9.0, 9.0, -1.0]]
    assert logprob_gap(masks, recorded, forced) == pytest.approx((0.5 + 0.0 + 0.5) / 3)


def test_load_trajectories_reads_eval_records(tmp_path: Path) -> None:
    eval_line = {"prompt_id": "7", "sample": 1, "token_ids": TOKENS, "loss_mask": MASK,
                 "logprobs": [0.0] * len(TOKENS), "prompt_len": 1}  # fmt: skip
    unfit = {"prompt_id": "8", "sample": 0, "token_ids": [1, 2], "loss_mask": [0, 0]}
    trace_line = {"step": 3, "traj_id": "s3-0", "token_ids": TOKENS, "loss_mask": MASK}
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (eval_line, unfit, trace_line)))
    loaded = load_trajectories(path)
    assert [t.name for t in loaded.trajectories] == ["7/1", "s3-0"] and loaded.skipped == 1
    assert loaded.trajectories[0].logprobs is not None and loaded.trajectories[1].logprobs is None
    assert [t.name for t in load_trajectories(path, step=3).trajectories] == ["s3-0"]
    assert [t.name for t in load_trajectories(path, limit=1).trajectories] == ["7/1"]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"prompt_id": "1", "turns": []}, "token_ids and loss_mask"),
        ({"token_ids": [1, 2], "loss_mask": [0]}, "2 token_ids but 1"),
        ({"token_ids": [1, 2], "loss_mask": [0, 2]}, "0/1 bits"),
        ({"token_ids": [1, 2], "loss_mask": [1, 1]}, "first token"),
    ],
)
def test_a_bad_record_is_named_by_file_and_line(
    tmp_path: Path, record: dict[str, object], message: str
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"token_ids": [1, 2], "loss_mask": [0, 1]}) + "\n"
                    + json.dumps(record) + "\n")  # fmt: skip
    with pytest.raises(ValueError, match=f"t.jsonl:2: .*{message}"):
        load_trajectories(path)
