"""Every CUDA kernel fits a real GPU's per-block limits on sm_80 and sm_90, checked by compiling to SASS without a
GPU (the simulator the other kernel tests use checks no resource). Runs in a subprocess: compiling needs numba-cuda's
real target, not the simulator this test process loads."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("cuda") is None or importlib.util.find_spec("nvidia") is None,
                                reason="the pip CUDA toolchain is not installed: pip install 'numba-cuda[cu12]'")

CHECK = """
import json, sys
from dataclasses import asdict
from assomem_gpu.kernels import fused_topk, resources
fused_topk.THREADS = int(sys.argv[1])
rows = resources.check()
print(json.dumps([dict(asdict(r), problems=r.problems()) for r in rows]))
"""


def check(threads: int) -> list[dict]:
    done = subprocess.run([sys.executable, "-c", CHECK, str(threads)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NUMBA_ENABLE_CUDASIM": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_kernel_fits_sm80_and_sm90():
    from assomem_gpu.kernels.fused_topk import THREADS

    rows = check(THREADS)
    assert {(r["kernel"], r["target"]) for r in rows} == {(k, t) for k in ("fused_topk", "assomem_ppr_step_kernel")
                                                          for t in ("sm_80", "sm_90")}
    for r in rows:
        assert r["problems"] == [], r
        assert r["registers"] > 0  # ptxas was read, not just run


def test_an_oversized_block_is_caught():
    """The fused top-K's shared merge buffer grows with the block: at 128 threads it needs 96 KiB, which no GPU
    launches without the dynamic opt-in (the kernel as it stood before this check asked for 66,176 bytes)."""
    rows = [r for r in check(128) if r["kernel"] == "fused_topk"]
    assert rows and all(r["shared_bytes"] > 48 * 1024 for r in rows)
    assert all(any("static shared memory" in p for p in r["problems"]) for r in rows)
