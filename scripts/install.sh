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
