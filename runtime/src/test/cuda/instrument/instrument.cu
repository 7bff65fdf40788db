// Kernels of the PTX instrumentation tests (InstrumentedKernelsGpuTest). Each plants a known set of
// out-of-range accesses (or none); the instrumented twin must report exactly those and compute the same bytes.
// Regenerate the PTX with ./build-ptx.sh (needs nvcc). No anonymous namespaces: nvcc would mangle them with a
// hash of the path, and the checked-in PTX must not depend on the checkout.
#include <cuda_pipeline.h>

// (a) Touches only its arguments: y[i] = 2 x[i] + 1. Never a violation.
extern "C" __global__ void thaw_instr_args_only(const float* x, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    y[i] = 2.0f * x[i] + 1.0f;
  }
}

// (b) Reads through a table of pointers held in another buffer: out[i] = sum_k table[k][i].
extern "C" __global__ void thaw_instr_pointer_table(const float* const* table, int count, int n, float* out) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    float s = 0.0f;
    for (int k = 0; k < count; k++) {
      s += table[k][i];
    }
    out[i] = s;
  }
}

// (c) Writes dst[0, n + extra): the last extra elements land in whatever follows dst.
extern "C" __global__ void thaw_instr_overflow(const float* src, float* dst, int n, int extra) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    dst[i] = src[i] * 3.0f;
  } else if (i < n + extra) {
    dst[i] = -1.0f;
  }
}

// (d) A predicated global store (only thread 3's predicate holds for victim) and generic stores that go to
// global memory for some threads and to shared memory for others. n <= blockDim.x, one block.
extern "C" __global__ void thaw_instr_predicated_generic(unsigned* out, unsigned* victim, int n) {
  __shared__ unsigned scratch[256];
  int i = threadIdx.x;
  if (i >= n) {
    return;
  }
  unsigned even = (i % 2 == 0) ? 1u : 0u;
  unsigned three = (i == 3) ? 1u : 0u;
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %0, 0;\n\t@p st.global.u32 [%1], %2;\n\t}"
      :: "r"(even), "l"(out + i), "r"(100u + i) : "memory");
  asm volatile(  // a negated guard: stores only where three != 0, that is in thread 3
      "{\n\t.reg .pred q;\n\tsetp.eq.u32 q, %0, 0;\n\t@!q st.global.u32 [%1], %2;\n\t}"
      :: "r"(three), "l"(victim + i), "r"(7u) : "memory");
  unsigned* p;
  if (i % 4 == 1) {
    p = victim + i;        // global, not allowed
  } else if (i % 4 == 2) {
    p = out + n + i;       // global, allowed
  } else {
    p = &scratch[i];       // shared: never checked
  }
  asm volatile("st.u32 [%0], %1;" :: "l"(p), "r"(200u + i) : "memory");
  __syncthreads();
  if (i % 4 == 0 || i % 4 == 3) {
    out[2 * n + i] = scratch[i];
  }
}

// (e) The accesses happen in device functions that are not inlined.
extern "C" __device__ __noinline__ void thaw_instr_store_at(float* p, int i, float v) {
  p[i] = v;
}

extern "C" __device__ __noinline__ float thaw_instr_load_at(const float* p, int i) {
  return p[i];
}

extern "C" __global__ void thaw_instr_calls(const float* x, float* out, float* victim, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    thaw_instr_store_at(out, i, thaw_instr_load_at(x, i) + 0.5f);
    if (i == 5) {
      thaw_instr_store_at(victim, 2, 9.0f);
    }
  }
}

// (f) An atomic whose result is used and a reduction whose result is not: counter[0] counts threads,
// counter[1] is the largest x, and seen[i] says thread i's atomicAdd returned a value below n.
extern "C" __global__ void thaw_instr_atomics(unsigned* counter, const unsigned* x, unsigned* seen, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned before = atomicAdd(&counter[0], 1u);
    atomicMax(&counter[1], x[i]);
    seen[i] = before < (unsigned)n ? 1u : 0u;
  }
}

// (g) cp.async from global to shared (16 bytes per thread), then back out: dst[i] = src[i].
extern "C" __global__ void thaw_instr_cp_async(const float4* src, float4* dst, int n) {
  __shared__ float4 stage[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    __pipeline_memcpy_async(&stage[threadIdx.x], &src[i], sizeof(float4));
  }
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  if (i < n) {
    dst[i] = stage[threadIdx.x];
  }
}

// (h) cp.async with a register source size, as tensor-core tiles stage operands: threads below n copy 16 bytes,
// the others zero-fill their slot with a source size of 0 from an address past the buffer, reading nothing.
extern "C" __global__ void thaw_instr_cp_async_zfill(const float4* src, float4* dst, int n) {
  __shared__ float4 stage[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(&stage[threadIdx.x]));
  int bytes = i < n ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src + i), "r"(bytes));
  asm volatile("cp.async.commit_group;\n" ::);
  asm volatile("cp.async.wait_group 0;\n" ::);
  __syncthreads();
  dst[i] = stage[threadIdx.x];
}
