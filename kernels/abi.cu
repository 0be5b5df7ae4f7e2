// ABI marker of the assomem_gpu CUDA C++ library. The hand-written kernels (a fused PPR iteration) join this
// library in the GPU-engine work; until then the build chain (CMake + nvcc, sm_80/sm_90 + PTX) is what is tested.
extern "C" int assomem_kernels_abi_version() { return 1; }
