// One PPR power-iteration step in a single pass (assomem_gpu.signals.importance):
//     out = (d·M) · r + base,   residual[col] += |out − r|  (L1 change per column)
// M is CSR (d already folded into its values), r/base/out are F-ordered (n × b) float32 on the device.
// The library path (cuSPARSE SpMM, then an add and a reduction) reads r twice and writes twice; this kernel reads
// r once per nonzero and writes out once, and fuses the residual.
#include <cuda_runtime.h>

extern "C" __global__ void assomem_ppr_step_kernel(const int* __restrict__ indptr, const int* __restrict__ indices,
                                                   const float* __restrict__ values, int n, int b,
                                                   const float* __restrict__ r, const float* __restrict__ base,
                                                   float* __restrict__ out, float* __restrict__ residual) {
  const long long total = static_cast<long long>(n) * b;
  for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(idx % n);
    const long long col = idx / n;
    const float* rc = r + col * n;
    float acc = 0.0f;
    for (int p = indptr[row]; p < indptr[row + 1]; ++p) acc += values[p] * rc[indices[p]];
    const float v = acc + base[idx];
    out[idx] = v;
    atomicAdd(residual + col, fabsf(v - rc[row]));
  }
}

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

extern "C" int assomem_kernels_abi_version() { return 2; }
