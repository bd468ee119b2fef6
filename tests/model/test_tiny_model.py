from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import Qwen2ForCausalLM

from rstar2.cli import main
from rstar2.config import ConfigError
from rstar2.model.chat_format import render_prompt
from rstar2.model.loader import load_model
from rstar2.model.tiny import build_model, init_model, tokenizer_corpus
from rstar2.model.tiny_config import TinyModelConfig, shaped_config
from rstar2.model.tokenizer import special_token_ids, train_tokenizer


def test_init_then_load_round_trip(tiny_dir: Path) -> None:
    assert (tiny_dir / "model.safetensors").is_file()
    model, tok = load_model(tiny_dir)
    assert model.config.vocab_size == len(tok)
    assert not model.training
    ids = torch.tensor([render_prompt(tok, "What is 12 * 34?")])
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], len(tok))
    special = special_token_ids(tok)
    assert set(model.generation_config.eos_token_id) == {special.im_end, special.eos}


def test_init_is_deterministic(tmp_path: Path, tiny_dir: Path, small_cfg: TinyModelConfig) -> None:
    other = init_model(tmp_path / "again", small_cfg)
    a, _ = load_model(tiny_dir)
    b, _ = load_model(other)
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(pa, pb), name
    assert (tiny_dir / "tokenizer.json").read_text() == (other / "tokenizer.json").read_text()


def test_default_size_is_about_a_million_parameters() -> None:
    cfg = TinyModelConfig(corpus_problems=50)
    model = build_model(cfg, train_tokenizer(tokenizer_corpus(cfg), cfg.vocab_size))
    n = sum(p.numel() for p in model.parameters())
    assert 700_000 < n < 3_000_000


def test_load_model_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(tmp_path)
    with pytest.raises(TypeError):
        load_model(tmp_path, dtype="float32")  # type: ignore[arg-type]


def test_config_validation_names_key() -> None:
    with pytest.raises(ConfigError, match="num_heads"):
        TinyModelConfig(hidden_size=30, num_heads=4).validate()


def test_init_model_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "m.toml"
    config.write_text(
        "[model]\nhidden_size = 16\nnum_layers = 1\nnum_heads = 2\nnum_kv_heads = 1\n"
        "intermediate_size = 16\ncorpus_problems = 50\n"
    )
    assert main(["init-model", str(tmp_path / "m"), "--config", str(config)]) == 0
    model, _ = load_model(tmp_path / "m")
    assert model.config.hidden_size == 16
    config.write_text("[model]\nhidden = 16\n")
    assert main(["init-model", str(tmp_path / "n"), "--config", str(config)]) == 2
    # a train config: the model its [model.tiny] describes; one that loads a model is refused
    config.write_text('seed = 1\n[model.tiny]\nhidden_size = 16\nnum_layers = 1\nnum_heads = 2\n'
                      'num_kv_heads = 1\nintermediate_size = 16\ncorpus_problems = 50\n')  # fmt: skip
    assert main(["init-model", str(tmp_path / "t"), "--config", str(config)]) == 0
    assert load_model(tmp_path / "t")[0].config.num_hidden_layers == 1
    config.write_text('[model]\npath = "models/x"\n')
    assert main(["init-model", str(tmp_path / "p"), "--config", str(config)]) == 2
    assert "model.path" in capsys.readouterr().err


def test_init_model_refuses_an_existing_directory_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "m.toml"
    config.write_text(
        "[model]\nhidden_size = 16\nnum_layers = 1\nnum_heads = 2\nnum_kv_heads = 1\n"
        "intermediate_size = 16\ncorpus_problems = 50\n"
    )
    target = tmp_path / "m"
    target.mkdir()  # an empty directory is fine
    assert main(["init-model", str(target), "--config", str(config)]) == 0
    capsys.readouterr()
    before = (target / "model.safetensors").stat().st_mtime_ns
    assert main(["init-model", str(target), "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--force" in err and str(target) in err
    assert (target / "model.safetensors").stat().st_mtime_ns == before  # untouched
    assert main(["init-model", str(target), "--config", str(config), "--force"]) == 0
    (tmp_path / "file").write_text("x")
    assert main(["init-model", str(tmp_path / "file"), "--force"]) == 2
    assert "this is a file" in capsys.readouterr().err


def test_an_interrupted_init_model_leaves_nothing_behind(
    tmp_path: Path, small_cfg: TinyModelConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the tokenizer's files and a config.json were written before the weights: a Ctrl-C there
    # left a directory a run's model-init check takes for a model, and --force was needed
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Qwen2ForCausalLM, "save_pretrained", interrupted)
    with pytest.raises(KeyboardInterrupt):
        init_model(tmp_path / "m", small_cfg)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("shape", "params"),
    [("qwen2.5-0.5b", 494_032_768), ("qwen2.5-1.5b", 1_543_714_304)],
)
def test_named_shapes_have_their_published_parameter_counts(shape: str, params: int) -> None:
    """Qwen2.5-0.5B and 1.5B: 494M and 1.54B parameters (their model cards; the padded
    151,936-row vocabulary, tied embeddings, q/k/v biases). Built on the meta device: no memory."""
    cfg = shaped_config(shape, corpus_problems=50)
    tok = train_tokenizer(tokenizer_corpus(cfg), cfg.vocab_size)
    with torch.device("meta"):
        model = build_model(cfg, tok)
    assert sum(p.numel() for p in model.parameters()) == params
    assert model.config.vocab_size == (cfg.embedding_rows or len(tok))


def test_shape_and_embedding_rows_errors() -> None:
    with pytest.raises(ValueError, match="qwen2.5-0.5b"):
        shaped_config("qwen-0.5b")
    cfg = TinyModelConfig(corpus_problems=50, embedding_rows=100)
    with pytest.raises(ValueError, match="embedding_rows 100"):
        build_model(cfg, train_tokenizer(tokenizer_corpus(cfg), cfg.vocab_size))
    with pytest.raises(ConfigError, match="embedding_rows"):
        TinyModelConfig(embedding_rows=-1).validate()


def test_init_model_shape_then_config_on_top(tmp_path: Path) -> None:
    """`--shape 25m` gives its widths; a `[model]` table in `--config` overrides them."""
    config = tmp_path / "m.toml"
    config.write_text("[model]\nnum_layers = 1\ncorpus_problems = 50\nembedding_rows = 4096\n")
    out = tmp_path / "m"
    assert main(["init-model", str(out), "--shape", "25m", "--config", str(config)]) == 0
    model, tok = load_model(out)
    assert (model.config.hidden_size, model.config.intermediate_size) == (512, 1536)
    assert model.config.num_hidden_layers == 1
    assert model.config.vocab_size == 4096 > len(tok)
