// Thaw's own collectives for the ranks of a tensor-parallel group (dev.thaw.examples.collective): each rank's kernel
// reads its peers' buffers directly, through peer mappings (VMM memory of another GPU, mapped in the one process's
// address space and granted to this GPU with cuMemSetAccess), over NVLink. No NCCL: nothing but the mappings is
// state, and the mappings are re-made at their recorded addresses when a group is restored.
//
// One-shot: every rank reads every rank's partial (its own included) and writes the whole result into its own
// memory, so no rank waits for another's result and no second phase runs. Every rank sums in rank order 0, 1, ...,
// so every rank computes the same bits. The caller orders the kernel after every rank's partial is written (a
// stream of each rank waits on the others' events, cuStreamWaitEvent across devices) and keeps a partial unwritten
// until every rank's kernel that reads it has run; nothing here synchronizes.
//
// thaw_allreduce_add: x[i] += ((p0[i] + p1[i]) + p2[i]) + p3[i] over the first `ranks` partials, i in [0, n); x is
// fp32, the partials fp32 (dtype 0), bfloat16 (1) or float16 (2), widened exactly, summed in fp32. n is a multiple
// of 8 and every pointer 16-byte aligned: a thread moves 8 elements with 16-byte loads (two for fp32). Grid-stride.
//
// thaw_allgather_columns: out [M, V] fp32 from the ranks' column slices: rank r holds columns
// [V*r/ranks, V*(r+1)/ranks) as a row-major [M, w_r] fp32 matrix at p_r (w_r its width). Grid-stride over M*V.
//
// Shape contract, which the Java twins (dev.thaw.examples.collective.CollectiveSimKernels) mirror byte for byte: the
// all-reduce reads n elements of each of the first `ranks` partials and reads and writes n floats of x; the gather
// reads M*w_r floats of each p_r and writes M*V floats of out; a pointer past `ranks` is never read (it may be 0).
//
// Regenerate the checked-in PTX with build-collective-ptx.sh after an edit; CollectivePtxTest checks that it is
// current and that it assembles for sm_90.

#define MAX_RANKS 4

__device__ __forceinline__ float half_to_float(unsigned int bits, int dtype) {
  if (dtype == 1) {
    return __uint_as_float(bits << 16);
  }
  float f;
  unsigned short h = (unsigned short) bits;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

// Elements [8u, 8u + 8) of a partial, widened to fp32.
__device__ __forceinline__ void load8(const void* p, long long u, int dtype, float (&v)[8]) {
  if (dtype == 0) {
    const float4* q = reinterpret_cast<const float4*>(p) + 2 * u;
    float4 a = q[0];
    float4 b = q[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else {
    uint4 w = reinterpret_cast<const uint4*>(p)[u];
    unsigned int words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
      v[2 * k] = half_to_float(words[k] & 0xffffu, dtype);
      v[2 * k + 1] = half_to_float(words[k] >> 16, dtype);
    }
  }
}

extern "C" __global__ void thaw_allreduce_add(float* x, const void* p0, const void* p1, const void* p2,
                                              const void* p3, int ranks, long long n, int dtype) {
  const void* parts[MAX_RANKS] = {p0, p1, p2, p3};
  long long units = n / 8;
  long long stride = (long long) gridDim.x * blockDim.x;
  for (long long u = (long long) blockIdx.x * blockDim.x + threadIdx.x; u < units; u += stride) {
    float s[8];
    load8(parts[0], u, dtype, s);
#pragma unroll
    for (int r = 1; r < MAX_RANKS; r++) {
      if (r < ranks) {
        float v[8];
        load8(parts[r], u, dtype, v);
#pragma unroll
        for (int k = 0; k < 8; k++) {
          s[k] += v[k];
        }
      }
    }
    float4* xo = reinterpret_cast<float4*>(x) + 2 * u;
    float4 a = xo[0];
    float4 b = xo[1];
    a.x += s[0]; a.y += s[1]; a.z += s[2]; a.w += s[3];
    b.x += s[4]; b.y += s[5]; b.z += s[6]; b.w += s[7];
    xo[0] = a;
    xo[1] = b;
  }
}

extern "C" __global__ void thaw_allgather_columns(float* out, const float* p0, const float* p1, const float* p2,
                                                  const float* p3, int ranks, int M, int V) {
  const float* parts[MAX_RANKS] = {p0, p1, p2, p3};
  long long total = (long long) M * V;
  long long stride = (long long) gridDim.x * blockDim.x;
  for (long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    int m = (int) (i / V);
    int j = (int) (i - (long long) m * V);
    int r = ranks - 1;
    while (r > 0 && j < (int) ((long long) V * r / ranks)) {
      r--;
    }
    int start = (int) ((long long) V * r / ranks);
    int width = (int) ((long long) V * (r + 1) / ranks) - start;
    const float* p = r == 0 ? parts[0] : r == 1 ? parts[1] : r == 2 ? parts[2] : parts[3];
    out[i] = p[(long long) m * width + (j - start)];
  }
}
