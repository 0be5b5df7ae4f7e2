#!/usr/bin/env bash
# The one GPU check (about 5 minutes on the lent H200): CUDA C++ build, the CUDA tests on the device (no simulator;
# they include cuda-vs-cpu ranking parity, which stands in for the slow networkx reference here),
# and the bench at 2,500 sessions on cuda and on cpu. Results land in ${OUT:-benchmarks/results}.
#
# The H200 image has torch, CuPy, Numba, numba-cuda, scipy, scikit-learn, networkx, rich, tqdm and pytest, but no
# network and none of bm25s, PyStemmer, dateparser (FAISS is optional: a GEMM range search replaces it). Before the
# run, here, fetch their wheels once:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl bm25s PyStemmer dateparser tzlocal pytz
# and call the device with carry [".whl"] and:  bash benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" NUMBA_ENABLE_CUDASIM=0
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu_check_device.txt"
cmake -S . -B build/cuda -DASSOMEM_OUTPUT_DIR="$PWD/assomem_gpu/_cuda" >/dev/null && cmake --build build/cuda -j8 >/dev/null \
  && echo "CUDA C++ library built" || echo "CUDA C++ build FAILED"
python3 -c "from assomem_gpu.backend import cuda_unavailable_reason as r; print('cuda backend:', r() or 'available')"
python3 -m pytest -q -p no:cacheprovider tests/test_fused_topk.py tests/test_backend.py tests/test_gpu_paths.py \
  tests/test_signals.py tests/test_cuda_build.py 2>&1 | tee "$OUT/gpu_check_tests.txt" | tail -5
timeout 240 python3 -m assomem_gpu.bench --device cuda --sessions 2500 --reference 0 --output "$OUT/bench_cuda.json" | tail -3
timeout 180 python3 -m assomem_gpu.bench --device cpu --sessions 2500 --reference 0 --output "$OUT/bench_cpu_on_gpu_host.json" | tail -3
