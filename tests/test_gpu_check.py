"""benchmarks/gpu_check.sh walks every step on the CPU (its dry run): install, build, resource check, tests, bench,
summary. Where no GPU is lent, this is the proof that the script is ready for one."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run(tmp_path):
    env = {**os.environ, "GPU_CHECK_DRY_RUN": "1", "GPU_CHECK_VENV": "current", "PYTHON": sys.executable,
           "OUT": str(tmp_path)}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh")], env=env, capture_output=True, text=True,
                          timeout=900)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    for step in ("environment", "CUDA C++ kernels", "kernel resources", "CUDA tests (cpu)", "bench (cpu: 50 sessions)"):
        assert f"== {step}" in said
    assert (tmp_path / "gpu_check_resources.txt").read_text().count(" ok") == 4
    assert "failed" not in (tmp_path / "gpu_check_tests.txt").read_text()
    assert "SUMMARY: cpu" in said and (tmp_path / "bench_cpu.json").exists()
