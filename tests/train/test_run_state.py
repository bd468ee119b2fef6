"""`RunState`'s prompt cache: problems of different splits that share an id stay apart."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from rstar2.model.chat_format import render_prompt
from rstar2.model.loader import load_tokenizer
from rstar2.model.tiny import init_model
from rstar2.model.tiny_config import TinyModelConfig
from rstar2.problem import Problem
from rstar2.train.config import load_train_config
from rstar2.train.run_state import RunState


def test_problems_of_two_splits_with_the_same_id_get_their_own_prompts(tmp_path: Path) -> None:
    # Problem files number their rows, so training problem "3" and held-out problem "3" are
    # different problems; the held-out one is encoded first (the SFT evaluation).
    model_dir = init_model(tmp_path / "m", TinyModelConfig(hidden_size=32, num_layers=1,
                           num_heads=2, num_kv_heads=1, intermediate_size=64, corpus_problems=50))  # fmt: skip
    tok = load_tokenizer(model_dir)
    policy = SimpleNamespace(pad_id=0)
    state = RunState(load_train_config(), tmp_path, policy, tok)  # type: ignore[arg-type]
    heldout, train = (
        Problem("3", "Compute 1 + 1.", "2"),
        Problem("3", "Compute 7 * 8.", "56"),
    )
    assert state.prompt_ids(heldout) == render_prompt(tok, heldout.problem)
    assert state.prompt_ids(train) == render_prompt(tok, train.problem)
    assert state.prompt_ids(train) != state.prompt_ids(heldout)
