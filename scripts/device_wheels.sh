#!/usr/bin/env bash
# The wheels a GPU machine without network needs to run rstar2 (docs/production.md, "On a GPU").
#
#   scripts/device_wheels.sh [DIR]        # default DIR: .whl (add it to .git/info/exclude)
#
# The GPU image (Python 3.12, torch, transformers, tokenizers, numpy, sympy, anyio, uvloop,
# matplotlib, tensorboard, pyarrow, safetensors, psutil, ...) lacks these rstar2 dependencies:
# the bus (pyzmq, msgspec), trio and its needs, the verifier (math-verify and its parser), and
# the sandbox's HTTP front. Versions are those this project's CI installs. On the GPU machine:
#
#   rm -rf /tmp/site; python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site
set -euo pipefail
dir=${1:-.whl}
mkdir -p "$dir"
py=${PYTHON:-python3}
wheels=(
  pyzmq==27.3.0 msgspec==0.22.0
  trio==0.35.0 outcome==1.3.0.post0 sniffio==1.3.1
  math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2
  starlette==1.10.0 hypercorn==0.18.0 h2==4.4.1 hpack==4.2.0 hyperframe==6.1.0 priority==2.0.0
  wsproto==1.3.2 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 pyseccomp==0.1.2
)
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
  manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
for w in "${wheels[@]}"; do
  # pure-Python packages (and pyseccomp, an sdist-only one) fall back to any wheel pip can build
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$dir" "$w" 2>/dev/null \
    || "$py" -m pip wheel -q --no-deps -w "$dir" "$w"
done
ls "$dir"
du -sh "$dir"
