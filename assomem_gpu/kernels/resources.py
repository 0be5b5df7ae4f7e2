"""What each CUDA kernel asks of a GPU, found without one: compiled to SASS for a target (sm_80, sm_90) and held
against the per-block limits, so a kernel that the simulator runs but a device would refuse fails in CI.

The Numba kernel is compiled to PTX by numba-cuda, the CUDA C++ (``kernels/*.cu``, its device part) by NVRTC; both
are assembled by ``ptxas -v``, whose report gives registers, spills and static shared memory. All three tools come
from pip (``numba-cuda[cu12]``: ``nvidia-cuda-nvcc-cu12``, ``nvidia-cuda-nvrtc-cu12``, ``cuda-bindings``).

    python -m assomem_gpu.kernels.resources        # a table; exit status 1 when a kernel breaks a limit
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

TARGETS = ("sm_80", "sm_90")
STATIC_SHARED_LIMIT = 48 * 1024  # bytes per block without the dynamic opt-in (every GPU since sm_70)
REGISTERS_PER_THREAD = 255
REGISTERS_PER_BLOCK = 65536
THREADS_PER_BLOCK = 1024
CUDA_SOURCES = Path(__file__).resolve().parents[2] / "kernels"


@dataclass(frozen=True)
class KernelResources:
    """One kernel on one target, as ptxas reports it, with the block size it is launched with."""

    kernel: str
    target: str
    threads: int  # per block, at launch
    registers: int  # per thread
    spill_bytes: int  # spill stores + loads
    shared_bytes: int  # static shared memory per block

    def problems(self) -> list[str]:
        """Each limit this kernel breaks, in words (empty when it can launch)."""
        out = []
        if self.shared_bytes > STATIC_SHARED_LIMIT:
            out.append(f"{self.shared_bytes} B static shared memory > {STATIC_SHARED_LIMIT}")
        if self.spill_bytes:
            out.append(f"{self.spill_bytes} B of register spills")
        if self.registers > REGISTERS_PER_THREAD:
            out.append(f"{self.registers} registers per thread > {REGISTERS_PER_THREAD}")
        if self.registers * self.threads > REGISTERS_PER_BLOCK:
            out.append(f"{self.registers} registers x {self.threads} threads > {REGISTERS_PER_BLOCK} per block")
        if not 0 < self.threads <= THREADS_PER_BLOCK:
            out.append(f"{self.threads} threads per block outside 1..{THREADS_PER_BLOCK}")
        return out


def ptxas() -> str:
    """The ptxas of the pip CUDA toolchain (``nvidia-cuda-nvcc-cu12``), else the one on PATH."""
    try:
        from nvidia import cuda_nvcc

        found = Path(next(iter(cuda_nvcc.__path__))) / "bin" / "ptxas"
        if found.exists():
            return str(found)
    except ImportError:
        pass
    on_path = shutil.which("ptxas")
    if on_path is None:
        raise RuntimeError("ptxas not found: pip install 'numba-cuda[cu12]' (it brings nvidia-cuda-nvcc-cu12)")
    return on_path


def assemble(ptx: str, target: str) -> dict[str, dict[str, int]]:
    """``ptxas -v`` of a PTX module for ``target``: per entry function, registers, spill bytes, static shared bytes
    (reported even where ptxas refuses the kernel for using too much)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        done = subprocess.run([ptxas(), "-v", "--gpu-name", target, str(src), "-o", str(Path(tmp) / "kernel.cubin")],
                              capture_output=True, text=True)
    out: dict[str, dict[str, int]] = {}
    name = None
    for line in done.stderr.splitlines():
        if m := re.search(r"Compiling entry function '(\S+)'", line):
            name = m.group(1)
            out[name] = {"registers": 0, "spill_bytes": 0, "shared_bytes": 0}
        elif name and (m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            out[name]["spill_bytes"] = int(m.group(1)) + int(m.group(2))
        elif name and (m := re.search(r"Used (\d+) registers", line)):
            out[name]["registers"] = int(m.group(1))
            smem = re.search(r"(\d+) bytes smem", line)
            out[name]["shared_bytes"] = int(smem.group(1)) if smem else 0
    if done.returncode != 0 and not out:  # a kernel over a limit still gets its report, and problems() names it
        raise RuntimeError(f"ptxas failed for {target}: {done.stderr.strip()}")
    return out


def fused_topk_ptx(target: str) -> str:
    """PTX of the fused score + top-K kernel (``kernels.fused_topk``) for ``target``, compiled without a device."""
    from numba import cuda, types
    from numba.cuda import dispatcher

    from . import fused_topk_cuda

    cc = (int(target[3:-1]), int(target[-1]))
    # numba-cuda asks the current device which architecture a device function is for; without a GPU, say it
    real = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=cc)
    try:
        kernel = fused_topk_cuda._cuda_kernel()  # fresh dispatchers: nothing compiled for another target is reused
        signature = (types.float32[:, :, ::1], types.int64[::1], types.float32[:, ::1], types.float64, types.int64,
                     types.int64[:, ::1], types.float64[:, ::1], types.float64[:, ::1], types.float64[:, ::1])
        ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=cc)
    finally:
        dispatcher.get_current_device = real
    return ptx


def cuda_source_ptx(path: Path, target: str) -> str:
    """PTX of the device code of a ``kernels/*.cu`` file (its host part is left out under NVRTC) for ``target``."""
    from cuda.bindings import nvrtc

    def ok(result):
        err, *rest = result
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC failed on {path.name}: {err}")
        return rest[0] if rest else None

    prog = ok(nvrtc.nvrtcCreateProgram(path.read_bytes(), path.name.encode(), 0, [], []))
    options = [f"--gpu-architecture=compute_{target[3:]}".encode(), b"--std=c++17"]
    compiled = nvrtc.nvrtcCompileProgram(prog, len(options), options)
    if compiled[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        log = b" " * ok(nvrtc.nvrtcGetProgramLogSize(prog))
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"NVRTC could not compile {path.name}:\n{log.decode(errors='replace').strip()}")
    ptx = b" " * ok(nvrtc.nvrtcGetPTXSize(prog))
    ok(nvrtc.nvrtcGetPTX(prog, ptx))
    nvrtc.nvrtcDestroyProgram(prog)
    return ptx.rstrip(b"\0 ").decode()


def check(targets: tuple[str, ...] = TARGETS) -> list[KernelResources]:
    """Every CUDA kernel of the package on every target, with the block size it is launched with."""
    from .fused_topk import THREADS

    found = []
    for target in targets:
        for name, used in assemble(fused_topk_ptx(target), target).items():
            found.append(KernelResources("fused_topk" if "fused_topk" in name else name, target, THREADS, **used))
        for source in sorted(CUDA_SOURCES.glob("*.cu")):
            threads = int(re.search(r"const int threads = (\d+);", source.read_text()).group(1))
            for name, used in assemble(cuda_source_ptx(source, target), target).items():
                found.append(KernelResources(name, target, threads, **used))
    return found


def main() -> int:
    rows = check()
    bad = 0
    print(f"{'kernel':32} {'target':6} {'threads':>7} {'regs':>5} {'spill B':>7} {'smem B':>7}  verdict")
    for r in rows:
        problems = r.problems()
        bad += bool(problems)
        print(f"{r.kernel[:32]:32} {r.target:6} {r.threads:7} {r.registers:5} {r.spill_bytes:7} {r.shared_bytes:7}  "
              + ("; ".join(problems) or "ok"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
