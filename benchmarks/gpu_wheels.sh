#!/usr/bin/env bash
# Wheels of what the lent H200's image lacks (its package list: the device tool's KINDS.md), for its Python (3.12),
# into .whl, which git ignores: call the device with carry [".whl"] and `bash benchmarks/gpu_check.sh`.
# About 61 MB (wordfreq's word lists are 57 MB of it): the repository and these fit the 64 MiB a call carries.
# The bundled MiniLM does not (free text is then not timed).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${PYTHON_VERSION:-3.12}" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
  bm25s PyStemmer dateparser tzlocal pytz wordfreq ftfy langcodes locate wcwidth
du -sh .whl
