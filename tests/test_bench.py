"""The latency bench: its growth exponents, and a whole run at two small sizes."""
import json
import subprocess
import sys

from assomem_gpu.bench import growth


def test_growth_exponents_are_log_log_slopes():
    small = {"sessions": 100, "build_s": 1.0, "single_p50_ms": 2.0, "batch_qps": {"1": 100.0}, "peak_rss_mb": 50.0}
    large = {"sessions": 1000, "build_s": 10.0, "single_p50_ms": 2.0, "batch_qps": {"1": 50.0}, "peak_rss_mb": None}
    [step] = growth([small, large])
    assert step["from"] == 100 and step["to"] == 1000
    assert step["slopes"] == {"build_s": 1.0, "single_p50_ms": 0.0, "qps_B1": -0.3}  # no slope without both figures


def test_bench_runs_two_sizes_and_reports_their_growth(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, "-m", "assomem_gpu.bench", "--sessions", "80", "40", "--batches", "1", "4",
                           "--single", "4", "--reference", "2", "--device", "cpu", "--output", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert [s["sessions"] for s in result["scales"]] == [40, 80]  # smallest first
    assert result["config"]["sentences"]  # the default config, sentence passages on
    assert all(s["after_writes_equals_rebuild"] and s["load_equals_saved"] for s in result["scales"])
    [step] = result["growth"]
    assert {"build_s", "single_p50_ms", "qps_B4"} <= set(step["slopes"])
    assert "growth 40 -> 80 sessions" in done.stdout
