// One PPR power-iteration step in a single pass (assomem_gpu.signals.importance):
//     out = (d·M) · r + base,   residual[col] += |out − r|  (L1 change per column)
// M is CSR (d already folded into its values), r/base/out are F-ordered (n × b) float32 on the device.
// The library path (cuSPARSE SpMM, then an add and a reduction) reads r twice and writes twice; this kernel reads
// r once per nonzero and writes out once, and fuses the residual: each warp sums its lanes' changes per column
// first, so a column takes one atomicAdd per warp that touches it, not one per element.
//
// The kernel part also compiles alone with NVRTC (__CUDACC_RTC__), which the resource check does without a GPU.
#ifndef __CUDACC_RTC__
#include <climits>
#include <cuda_runtime.h>
#else
#define LLONG_MAX 9223372036854775807LL
#endif

extern "C" __global__ void assomem_ppr_step_kernel(const int* __restrict__ indptr, const int* __restrict__ indices,
                                                   const float* __restrict__ values, int n, int b,
                                                   const float* __restrict__ r, const float* __restrict__ base,
                                                   float* __restrict__ out, float* __restrict__ residual) {
  const long long total = static_cast<long long>(n) * b;
  const unsigned lane = threadIdx.x & 31u;
  // warp-uniform trip count: every lane of a warp runs each iteration, so the shuffles below see all 32
  for (long long start = blockIdx.x * static_cast<long long>(blockDim.x); start < total;
       start += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long idx = start + threadIdx.x;
    float change = 0.0f;
    long long col = LLONG_MAX;  // lanes past the end: a column of their own, after every real one
    if (idx < total) {
      const int row = static_cast<int>(idx % n);
      col = idx / n;
      const float* rc = r + col * n;
      float acc = 0.0f;
      for (int p = indptr[row]; p < indptr[row + 1]; ++p) acc += values[p] * rc[indices[p]];
      const float v = acc + base[idx];
      out[idx] = v;
      change = fabsf(v - rc[row]);
    }
    // segmented sum over the warp: columns never decrease along the lanes, so after the step with offset `off`
    // a lane holds the changes of the lanes in [lane, lane + 2·off) that share its column
    for (unsigned off = 16; off > 0; off >>= 1) {
      const float other = __shfl_down_sync(0xffffffffu, change, off);
      const long long other_col = __shfl_down_sync(0xffffffffu, col, off);
      if (lane + off < 32 && other_col == col) change += other;
    }
    const long long previous = __shfl_up_sync(0xffffffffu, col, 1);
    if (col != LLONG_MAX && (lane == 0 || previous != col)) atomicAdd(residual + col, change);  // segment heads
  }
}

#ifndef __CUDACC_RTC__
// Host entry point, called through ctypes with device pointers (CuPy arrays' .data.ptr) and a CUDA stream.
extern "C" int assomem_ppr_step(const int* indptr, const int* indices, const float* values, int n, int b,
                                const float* r, const float* base, float* out, float* residual, cudaStream_t stream) {
  cudaMemsetAsync(residual, 0, sizeof(float) * b, stream);
  const long long total = static_cast<long long>(n) * b;
  const int threads = 256;
  const int blocks = static_cast<int>((total + threads - 1) / threads < 65535 ? (total + threads - 1) / threads : 65535);
  if (total > 0) assomem_ppr_step_kernel<<<blocks, threads, 0, stream>>>(indptr, indices, values, n, b, r, base, out,
                                                                          residual);
  return static_cast<int>(cudaGetLastError());
}

extern "C" int assomem_kernels_abi_version() { return 3; }

// The CUDA runtime the library was compiled against (CUDART_VERSION, e.g. 12090): its major must be CuPy's.
extern "C" int assomem_kernels_cuda_runtime_version() { return CUDART_VERSION; }
#endif
