import numpy as np
import pytest

from assomem_gpu.backend import cuda_unavailable_reason, get_backend


def test_auto_falls_back_to_cpu_and_says_why():
    reason = cuda_unavailable_reason()
    backend = get_backend("auto")
    if reason is None:  # a real GPU machine
        assert backend.name == "cuda"
    else:
        assert backend.name == "cpu" and backend.xp is np and isinstance(reason, str) and reason
        with pytest.raises(RuntimeError, match="CUDA backend unavailable"):
            get_backend("cuda")


def test_cpu_backend_parts():
    b = get_backend("cpu")
    idx, _ = b.fused_topk(np.array([[[1.0], [3.0], [2.0]]], np.float32), np.array([3]), np.ones((1, 1), np.float32), 1.0, 2)
    assert idx.tolist() == [[1, 2]] and b.to_host(b.asarray([1, 2])).tolist() == [1, 2]
    with pytest.raises(ValueError, match="device must be"):
        get_backend("tpu")
