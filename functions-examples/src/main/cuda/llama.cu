// Llama-family inference kernels (Llama 3.x, Qwen2/2.5, Mistral): bf16 or fp16 weights and activations, fp32
// accumulation and an fp32 residual stream.
//
// Their Java twins for the simulated device are dev.thaw.examples.llama.kernels.*SimKernel; the host wrapper
// that checks shapes and launches them is dev.thaw.examples.llama.kernels.LlamaKernels. Keep the three in step
// and regenerate the checked-in PTX with build-llama-ptx.sh after an edit (a test compares them).
//
// Notation: C = hidden size, Hq / Hkv = query / key-value heads (grouped-query attention: query head h reads
// key-value head h / (Hq / Hkv)), D = head size, I = intermediate size, V = vocabulary, M = token rows in this
// call (the sum of the prompt lengths for a prompt pass, the batch for a decode step). Matrices are row-major.
// Linear weights are as Hugging Face stores them, W [N, K] (out, in), so every product is Y = X W^T. Every
// entry takes `bf16`: 1 = the 16-bit tensors are bfloat16, 0 = IEEE binary16; both instantiate one template.
//
// Design
// - Every kernel touches exactly the bytes its Java twin touches (the sim device records them and the runtime
//   validates access speculation against them): rows past M or N of a padded tile are never loaded, an id
//   outside the vocabulary reads no embedding row, a bias is read only when has_bias is set.
// - No atomics and no order that depends on scheduling: every output is produced by one thread and every sum is
//   taken in a fixed order, so a kernel gives the same bits on every run.
// - Decode (M <= 8) is a stream over the weights: llama_gemv gives each warp one output column n and has its
//   lanes walk W's row n with 16-byte loads, four in flight per lane, reusing each loaded weight for all M rows
//   of X (read through L1: X is a few KiB). N/8 blocks of 256 threads (512 for N = 4096, 16032 for a 128256
//   vocabulary) keep every SM of an H100/H200 pulling at once. llama_gemv1 is the same for M = 1, a separate
//   entry with fewer registers (one accumulator), so more warps, and loads in flight, fit on an SM.
// - Prompts (M > 8) run on the tensor cores: llama_matmul is a 64x64 output tile per block of 4 warps, each warp
//   a 32x32 quarter as 2x2 WMMA 16x16x16 fragments (bf16 or half in, fp32 accumulate), K in steps of 32 staged
//   through shared memory with the next step prefetched into registers.
// - Both matmuls share their epilogues: store in the 16-bit type (with an optional bias: Qwen2's q/k/v), add
//   into the fp32 residual stream, or store fp32 (the logits).
// - llama_rope_kv rotates q in place and k on its way into the cache (rotate_half pairing (d, d + D/2), angles
//   position * inv_freq in fp32, the inverse frequencies computed on the host, llama3 scaling included), and
//   copies v; caches are [B, Hkv, maxT, D].
// - llama_attention: one block per (query head, row), scores for the causal window in shared memory (<= 4096),
//   softmax with max subtraction, then P.V with 16-byte loads of value rows, keys split among thread groups.
// - Elementwise kernels are grid-stride: any grid covers the whole range.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <stdint.h>

#include <climits>

using namespace nvcuda;

// Helpers live in a named namespace, not an anonymous one: nvcc mangles anonymous-namespace names with a
// hash of the source path, which would make the checked-in PTX differ from checkout to checkout.
namespace thaw_llama {

typedef __nv_bfloat16 bf16;

constexpr int kMaxContext = 4096;  // longest context llama_attention supports (scores in shared memory)
constexpr int kMaxD = 256;         // largest head size llama_attention supports
constexpr int kAttnThreads = 128;

constexpr int kGemvWarps = 8;       // output columns per gemv block
constexpr int kGemvThreads = kGemvWarps * 32;
constexpr int kGemvMaxRows = 8;     // largest M llama_gemv takes
constexpr int kGemvUnroll = 4;      // 16-byte weight loads in flight per lane

constexpr int kTm = 64;             // llama_matmul output tile: rows
constexpr int kTn = 64;             //                            columns
constexpr int kTk = 32;             // K step
constexpr int kMatmulThreads = 128;
constexpr int kLds = kTk + 8;       // shared row stride of the staged operands (16-bit elements)
constexpr int kLdc = kTn + 4;       // shared row stride of the fp32 output tile
constexpr int kMatmulSmem = 2 * kTm * kLds * 2 + kTm * kLdc * 4;

constexpr int kEpilogueStore = 0;     // Y = T(acc [+ bias])
constexpr int kEpilogueResidual = 1;  // R = R + acc, fp32
constexpr int kEpilogueFloat = 2;     // L = acc, fp32

template <typename T>
__device__ __forceinline__ float to_f(T v);
template <>
__device__ __forceinline__ float to_f<half>(half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_f<bf16>(bf16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ half from_f<half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ bf16 from_f<bf16>(float v) {
  return __float2bfloat16_rn(v);
}

// The 8 16-bit values of a 16-byte word, as floats.
template <typename T>
__device__ __forceinline__ void unpack8(const uint4& u, float* f);
template <>
__device__ __forceinline__ void unpack8<half>(const uint4& u, float* f) {
  const half2* h = reinterpret_cast<const half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    float2 v = __half22float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}
template <>
__device__ __forceinline__ void unpack8<bf16>(const uint4& u, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    float2 v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

// Sum over the block, the same value in every thread. blockDim.x must be a multiple of 32. The leading
// barrier keeps a previous call's readers of red[] ahead of this call's writers.
__device__ float block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = 0.0f;
  int nw = blockDim.x >> 5;
  for (int i = 0; i < nw; i++) t += red[i];
  return t;
}

__device__ float block_max(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = red[0];
  int nw = blockDim.x >> 5;
  for (int i = 1; i < nw; i++) t = fmaxf(t, red[i]);
  return t;
}

// Output (m, n) of a product: the epilogue shared by both matmuls.
template <typename T>
__device__ __forceinline__ void epilogue(float acc, const T* __restrict__ bias, void* __restrict__ out, int m,
                                         int n, int N, int mode, int has_bias) {
  const size_t i = (size_t)m * N + n;
  if (mode == kEpilogueStore) {
    float v = has_bias ? acc + to_f<T>(bias[n]) : acc;
    reinterpret_cast<T*>(out)[i] = from_f<T>(v);
  } else if (mode == kEpilogueResidual) {
    float* r = reinterpret_cast<float*>(out);
    r[i] = r[i] + acc;
  } else if (mode == kEpilogueFloat) {
    reinterpret_cast<float*>(out)[i] = acc;
  }
}

template <typename T>
__device__ __forceinline__ void embed(const T* __restrict__ table, const int* __restrict__ tokens,
                                      float* __restrict__ x, int M, int C, int V) {
  const size_t total = (size_t)M * C;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int m = (int)(i / C);
    const int c = (int)(i - (size_t)m * C);
    const int t = tokens[m];
    x[i] = (t >= 0 && t < V) ? to_f<T>(table[(size_t)t * C + c]) : 0.0f;
  }
}

template <typename T>
__device__ __forceinline__ void rmsnorm(const float* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                        int M, int C, float eps, float* red) {
  for (int row = blockIdx.x; row < M; row += gridDim.x) {
    const float* xr = x + (size_t)row * C;
    T* yr = y + (size_t)row * C;
    float s = 0.0f;
    // Unrolled: at decode there is one row, and 16 dependent round trips per thread would be the kernel's time.
#pragma unroll 4
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += xr[c] * xr[c];
    const float r = rsqrtf(block_sum(s, red) / (float)C + eps);
#pragma unroll 4
    for (int c = threadIdx.x; c < C; c += blockDim.x) yr[c] = from_f<T>(__fmul_rn(xr[c], r) * to_f<T>(w[c]));
  }
}

template <typename T, int ROWS>
__device__ __forceinline__ void gemv(const T* __restrict__ X, const T* __restrict__ W, const T* __restrict__ bias,
                                     void* __restrict__ out, int M, int N, int K, int mode, int has_bias) {
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * kGemvWarps + warp;
  if (n >= N) return;
  float acc[ROWS];
#pragma unroll
  for (int m = 0; m < ROWS; m++) acc[m] = 0.0f;
  const T* wr = W + (size_t)n * K;
  for (int k0 = lane * 8; k0 < K; k0 += 32 * 8 * kGemvUnroll) {
    uint4 wv[kGemvUnroll];
#pragma unroll
    for (int u = 0; u < kGemvUnroll; u++) {
      const int k = k0 + u * 256;
      if (k < K) wv[u] = __ldcs(reinterpret_cast<const uint4*>(wr + k));
    }
#pragma unroll
    for (int u = 0; u < kGemvUnroll; u++) {
      const int k = k0 + u * 256;
      if (k < K) {
        float wf[8];
        unpack8<T>(wv[u], wf);
#pragma unroll
        for (int m = 0; m < ROWS; m++) {
          if (m < M) {
            float xf[8];
            unpack8<T>(*reinterpret_cast<const uint4*>(X + (size_t)m * K + k), xf);
            float s = acc[m];
#pragma unroll
            for (int i = 0; i < 8; i++) s = fmaf(xf[i], wf[i], s);
            acc[m] = s;
          }
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < ROWS; m++) {
    float v = acc[m];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    acc[m] = v;
  }
  // Every lane holds every row's sum now; lane m writes row m (one epilogue site, not one per row).
  float mine = 0.0f;
#pragma unroll
  for (int m = 0; m < ROWS; m++) mine = lane == m ? acc[m] : mine;
  if (lane < M) epilogue<T>(mine, bias, out, lane, n, N, mode, has_bias);
}

template <typename T>
__device__ __forceinline__ void matmul(const T* __restrict__ X, const T* __restrict__ W, const T* __restrict__ bias,
                                       void* __restrict__ out, int M, int N, int K, int mode, int has_bias,
                                       unsigned char* smem) {
  T* as = reinterpret_cast<T*>(smem);                   // [kTm][kLds]: X rows m0.., k0..k0+31
  T* bs = as + kTm * kLds;                              // [kTn][kLds]: W rows n0.., k0..k0+31
  float* cs = reinterpret_cast<float*>(bs + kTn * kLds);  // [kTm][kLdc]
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int m0 = blockIdx.y * kTm;
  const int n0 = blockIdx.x * kTn;
  const int wm = (warp >> 1) * 32;
  const int wn = (warp & 1) * 32;
  // Each thread moves 16 bytes of rows lr and lr + 32 of each operand per K step.
  const int lr = tid >> 2;
  const int lc = (tid & 3) * 8;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  uint4 a[2];
  uint4 b[2];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int r = lr + 32 * i;
    a[i] = m0 + r < M ? *reinterpret_cast<const uint4*>(X + (size_t)(m0 + r) * K + lc) : zero;
    b[i] = n0 + r < N ? *reinterpret_cast<const uint4*>(W + (size_t)(n0 + r) * K + lc) : zero;
  }
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> af[2];
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bf[2];
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; i++) {
#pragma unroll
    for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);
  }
  for (int k0 = 0; k0 < K; k0 += kTk) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int r = lr + 32 * i;
      *reinterpret_cast<uint4*>(as + r * kLds + lc) = a[i];
      *reinterpret_cast<uint4*>(bs + r * kLds + lc) = b[i];
    }
    __syncthreads();
    const int kn = k0 + kTk;
    if (kn < K) {
#pragma unroll
      for (int i = 0; i < 2; i++) {
        const int r = lr + 32 * i;
        if (m0 + r < M) a[i] = *reinterpret_cast<const uint4*>(X + (size_t)(m0 + r) * K + kn + lc);
        if (n0 + r < N) b[i] = *reinterpret_cast<const uint4*>(W + (size_t)(n0 + r) * K + kn + lc);
      }
    }
#pragma unroll
    for (int kk = 0; kk < kTk; kk += 16) {
#pragma unroll
      for (int i = 0; i < 2; i++) wmma::load_matrix_sync(af[i], as + (wm + 16 * i) * kLds + kk, kLds);
      // bs holds W rows [n][k]: that is B = W^T [k][n] in column-major order with leading dimension kLds.
#pragma unroll
      for (int j = 0; j < 2; j++) wmma::load_matrix_sync(bf[j], bs + (wn + 16 * j) * kLds + kk, kLds);
#pragma unroll
      for (int i = 0; i < 2; i++) {
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
      }
    }
    __syncthreads();  // the next step overwrites as and bs
  }
#pragma unroll
  for (int i = 0; i < 2; i++) {
#pragma unroll
    for (int j = 0; j < 2; j++) {
      wmma::store_matrix_sync(cs + (wm + 16 * i) * kLdc + wn + 16 * j, acc[i][j], kLdc, wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int e = tid; e < kTm * kTn; e += kMatmulThreads) {
    const int r = e / kTn;
    const int c = e - r * kTn;
    if (m0 + r < M && n0 + c < N) epilogue<T>(cs[r * kLdc + c], bias, out, m0 + r, n0 + c, N, mode, has_bias);
  }
}

template <typename T>
__device__ __forceinline__ void rope_kv(T* __restrict__ qkv, T* __restrict__ kcache, T* __restrict__ vcache,
                                        const float* __restrict__ inv_freq, const int* __restrict__ positions,
                                        const int* __restrict__ cache_rows, int M, int Hq, int Hkv, int D,
                                        int maxT) {
  const int hd = D / 2;
  const int rotated = (Hq + Hkv) * hd;  // q and k pairs of a row
  const int per_row = rotated + Hkv * hd;  // then v pairs
  const int width = (Hq + 2 * Hkv) * D;
  const size_t total = (size_t)M * per_row;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int m = (int)(i / per_row);
    const int j = (int)(i - (size_t)m * per_row);
    T* row = qkv + (size_t)m * width;
    const int pos = positions[m];
    if (j < rotated) {
      const int head = j / hd;
      const int d = j - head * hd;
      float s;
      float c;
      sincosf(__fmul_rn((float)pos, inv_freq[d]), &s, &c);
      T* src = row + head * D + d;
      const float x1 = to_f<T>(src[0]);
      const float x2 = to_f<T>(src[hd]);
      const T y1 = from_f<T>(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
      const T y2 = from_f<T>(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
      if (head < Hq) {
        src[0] = y1;
        src[hd] = y2;
      } else {
        const size_t dst = (((size_t)cache_rows[m] * Hkv + (head - Hq)) * maxT + pos) * D + d;
        kcache[dst] = y1;
        kcache[dst + hd] = y2;
      }
    } else {
      const int jj = j - rotated;
      const int head = jj / hd;
      const int d = jj - head * hd;
      const T* src = row + (Hq + Hkv) * D + head * D + d;
      const size_t dst = (((size_t)cache_rows[m] * Hkv + head) * maxT + pos) * D + d;
      vcache[dst] = src[0];
      vcache[dst + hd] = src[hd];
    }
  }
}

template <typename T>
__device__ __forceinline__ void attention(const T* __restrict__ qkv, const T* __restrict__ kcache,
                                          const T* __restrict__ vcache, T* __restrict__ out,
                                          const int* __restrict__ positions, const int* __restrict__ cache_rows,
                                          int Hq, int Hkv, int D, int maxT, float scale, float* q, float* p,
                                          float* part, float* red) {
  const int h = blockIdx.x;
  const int m = blockIdx.y;
  const int tid = threadIdx.x;
  const int kv = h / (Hq / Hkv);
  const int len = positions[m] + 1;
  const size_t head = ((size_t)cache_rows[m] * Hkv + kv) * maxT * D;
  const T* kh = kcache + head;
  const T* vh = vcache + head;

  const T* qh = qkv + (size_t)m * (Hq + 2 * Hkv) * D + (size_t)h * D;
  for (int d = tid; d < D; d += blockDim.x) q[d] = to_f<T>(qh[d]);
  __syncthreads();

  // Scores: each thread a key at a time, the dot product in d order.
  float local_max = -INFINITY;
  for (int t = tid; t < len; t += blockDim.x) {
    const T* kr = kh + (size_t)t * D;
    float dot = 0.0f;
#pragma unroll 4
    for (int d = 0; d < D; d += 8) {
      float f[8];
      unpack8<T>(*reinterpret_cast<const uint4*>(kr + d), f);
#pragma unroll
      for (int i = 0; i < 8; i++) dot += q[d + i] * f[i];
    }
    const float s = scale * dot;
    p[t] = s;
    local_max = fmaxf(local_max, s);
  }
  const float mx = block_max(local_max, red);
  float local_sum = 0.0f;
  for (int t = tid; t < len; t += blockDim.x) {
    const float e = expf(p[t] - mx);
    p[t] = e;
    local_sum += e;
  }
  const float sum = block_sum(local_sum, red);  // its barriers also publish p[]

  // P.V: D/8 threads cover a value row with 16-byte loads (8 dims each); the G = blockDim / (D/8) groups of them
  // take keys g, g + G, ... (several loads in flight per thread, not one dependent load per key), and the groups'
  // sums are added in group order.
  const int lanes = D / 8;
  const int G = blockDim.x / lanes;
  const int g = tid / lanes;
  const int j = tid - g * lanes;
  if (g < G) {
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++) acc[i] = 0.0f;
#pragma unroll 4
    for (int t = g; t < len; t += G) {
      float f[8];
      unpack8<T>(*reinterpret_cast<const uint4*>(vh + (size_t)t * D + 8 * j), f);
      const float pt = p[t];
#pragma unroll
      for (int i = 0; i < 8; i++) acc[i] += pt * f[i];
    }
#pragma unroll
    for (int i = 0; i < 8; i++) part[g * D + 8 * j + i] = acc[i];
  }
  __syncthreads();
  for (int d = tid; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int k = 0; k < G; k++) o += part[k * D + d];
    out[(size_t)m * Hq * D + (size_t)h * D + d] = from_f<T>(o / sum);
  }
}

template <typename T>
__device__ __forceinline__ void swiglu(const T* __restrict__ gu, T* __restrict__ y, int M, int I) {
  const size_t total = (size_t)M * I;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int m = (int)(i / I);
    const int j = (int)(i - (size_t)m * I);
    const T* row = gu + (size_t)m * 2 * I;
    const float g = to_f<T>(row[j]);
    const float u = to_f<T>(row[I + j]);
    y[i] = from_f<T>(__fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u));
  }
}

}  // namespace thaw_llama

using namespace thaw_llama;

// x[m,c] = float(table[tokens[m],c]), x fp32 [M, C]; a row whose id is outside [0, V) is zeros (and reads
// nothing), so a bad id from a NaN argmax cannot read past the table.
extern "C" __global__ void llama_embed(const void* __restrict__ table, const int* __restrict__ tokens,
                                       float* __restrict__ x, int M, int C, int V, int bf16) {
  if (bf16) {
    embed<thaw_llama::bf16>(reinterpret_cast<const thaw_llama::bf16*>(table), tokens, x, M, C, V);
  } else {
    embed<half>(reinterpret_cast<const half*>(table), tokens, x, M, C, V);
  }
}

// Per row of fp32 x [M, C]: y = T(x * rsqrt(mean(x^2) + eps) * w). One block (a multiple of 32 threads) per
// row, grid-stride over rows.
extern "C" __global__ void llama_rmsnorm(const float* __restrict__ x, const void* __restrict__ w,
                                         void* __restrict__ y, int M, int C, float eps, int bf16) {
  __shared__ float red[32];
  if (bf16) {
    rmsnorm<thaw_llama::bf16>(x, reinterpret_cast<const thaw_llama::bf16*>(w),
                              reinterpret_cast<thaw_llama::bf16*>(y), M, C, eps, red);
  } else {
    rmsnorm<half>(x, reinterpret_cast<const half*>(w), reinterpret_cast<half*>(y), M, C, eps, red);
  }
}

// out = epilogue(X W^T) for M <= 8 rows: X [M, K], W [N, K], out [M, N] (see epilogue). Grid ceil(N/8), 256
// threads. K a multiple of 8; X and W 16-byte aligned.
extern "C" __global__ void __launch_bounds__(kGemvThreads)
    llama_gemv(const void* __restrict__ X, const void* __restrict__ W, const void* __restrict__ bias,
               void* __restrict__ out, int M, int N, int K, int mode, int has_bias, int bf16) {
  if (bf16) {
    gemv<thaw_llama::bf16, kGemvMaxRows>(reinterpret_cast<const thaw_llama::bf16*>(X),
                                         reinterpret_cast<const thaw_llama::bf16*>(W),
                                         reinterpret_cast<const thaw_llama::bf16*>(bias), out, M, N, K, mode,
                                         has_bias);
  } else {
    gemv<half, kGemvMaxRows>(reinterpret_cast<const half*>(X), reinterpret_cast<const half*>(W),
                             reinterpret_cast<const half*>(bias), out, M, N, K, mode, has_bias);
  }
}

// llama_gemv for M = 1, batch-1 decode: its own entry so that it gets its own (smaller) register allocation and
// so more resident warps, hence more weight loads in flight per SM. Same arguments and launch; M must be 1.
extern "C" __global__ void __launch_bounds__(kGemvThreads)
    llama_gemv1(const void* __restrict__ X, const void* __restrict__ W, const void* __restrict__ bias,
                void* __restrict__ out, int M, int N, int K, int mode, int has_bias, int bf16) {
  if (bf16) {
    gemv<thaw_llama::bf16, 1>(reinterpret_cast<const thaw_llama::bf16*>(X),
                              reinterpret_cast<const thaw_llama::bf16*>(W),
                              reinterpret_cast<const thaw_llama::bf16*>(bias), out, 1, N, K, mode, has_bias);
  } else {
    gemv<half, 1>(reinterpret_cast<const half*>(X), reinterpret_cast<const half*>(W),
                  reinterpret_cast<const half*>(bias), out, 1, N, K, mode, has_bias);
  }
}

// out = epilogue(X W^T) on the tensor cores, any M: X [M, K], W [N, K], out [M, N]. Grid (ceil(N/64),
// ceil(M/64)), 128 threads. K a multiple of 32; X and W 16-byte aligned.
extern "C" __global__ void __launch_bounds__(kMatmulThreads)
    llama_matmul(const void* __restrict__ X, const void* __restrict__ W, const void* __restrict__ bias,
                 void* __restrict__ out, int M, int N, int K, int mode, int has_bias, int bf16) {
  __shared__ __align__(128) unsigned char smem[kMatmulSmem];
  if (bf16) {
    matmul<thaw_llama::bf16>(reinterpret_cast<const thaw_llama::bf16*>(X),
                             reinterpret_cast<const thaw_llama::bf16*>(W),
                             reinterpret_cast<const thaw_llama::bf16*>(bias), out, M, N, K, mode, has_bias, smem);
  } else {
    matmul<half>(reinterpret_cast<const half*>(X), reinterpret_cast<const half*>(W),
                 reinterpret_cast<const half*>(bias), out, M, N, K, mode, has_bias, smem);
  }
}

// qkv [M, (Hq + 2 Hkv) D] = q | k | v per row. Rotates each q head in place and each k head into
// kcache[cache_rows[m], kv, positions[m], :], copies each v head into vcache there. Angle of pair (d, d + D/2)
// at position p: fp32 p * inv_freq[d]. Grid-stride over M (Hq + 2 Hkv) D/2.
extern "C" __global__ void llama_rope_kv(void* __restrict__ qkv, void* __restrict__ kcache,
                                         void* __restrict__ vcache, const float* __restrict__ inv_freq,
                                         const int* __restrict__ positions, const int* __restrict__ cache_rows,
                                         int M, int Hq, int Hkv, int D, int maxT, int bf16) {
  if (bf16) {
    rope_kv<thaw_llama::bf16>(reinterpret_cast<thaw_llama::bf16*>(qkv), reinterpret_cast<thaw_llama::bf16*>(kcache),
                              reinterpret_cast<thaw_llama::bf16*>(vcache), inv_freq, positions, cache_rows, M, Hq,
                              Hkv, D, maxT);
  } else {
    rope_kv<half>(reinterpret_cast<half*>(qkv), reinterpret_cast<half*>(kcache), reinterpret_cast<half*>(vcache),
                  inv_freq, positions, cache_rows, M, Hq, Hkv, D, maxT);
  }
}

// out[m, h*D + d] = T(sum_{t <= positions[m]} p_t v_t[d]), p = softmax_t(scale q.k_t) in fp32 with max
// subtraction; q from head h of qkv row m, k_t and v_t from the caches at cache_rows[m], kv head h / (Hq/Hkv).
// Grid (Hq, M), 128 threads. D a multiple of 8 and <= 256, positions[m] < maxT <= 4096; qkv and the caches
// 16-byte aligned. Run llama_rope_kv first: it rotates q and puts the row's own k and v in the cache.
extern "C" __global__ void __launch_bounds__(kAttnThreads)
    llama_attention(const void* __restrict__ qkv, const void* __restrict__ kcache, const void* __restrict__ vcache,
                    void* __restrict__ out, const int* __restrict__ positions, const int* __restrict__ cache_rows,
                    int M, int Hq, int Hkv, int D, int maxT, float scale, int bf16) {
  __shared__ float q[kMaxD];
  __shared__ float p[kMaxContext];
  __shared__ float part[8 * kAttnThreads];  // G x D <= (blockDim / (D/8)) x D = 8 x blockDim
  __shared__ float red[32];
  if (bf16) {
    attention<thaw_llama::bf16>(reinterpret_cast<const thaw_llama::bf16*>(qkv),
                                reinterpret_cast<const thaw_llama::bf16*>(kcache),
                                reinterpret_cast<const thaw_llama::bf16*>(vcache),
                                reinterpret_cast<thaw_llama::bf16*>(out), positions, cache_rows, Hq, Hkv, D, maxT,
                                scale, q, p, part, red);
  } else {
    attention<half>(reinterpret_cast<const half*>(qkv), reinterpret_cast<const half*>(kcache),
                    reinterpret_cast<const half*>(vcache), reinterpret_cast<half*>(out), positions, cache_rows, Hq,
                    Hkv, D, maxT, scale, q, p, part, red);
  }
}

// y[m, i] = T(silu(g) * u), g = gu[m, i], u = gu[m, I + i], silu(g) = g / (1 + exp(-g)); gu [M, 2I] is the
// fused gate | up product. Grid-stride over M I.
extern "C" __global__ void llama_swiglu(const void* __restrict__ gu, void* __restrict__ y, int M, int I, int bf16) {
  if (bf16) {
    swiglu<thaw_llama::bf16>(reinterpret_cast<const thaw_llama::bf16*>(gu), reinterpret_cast<thaw_llama::bf16*>(y),
                             M, I);
  } else {
    swiglu<half>(reinterpret_cast<const half*>(gu), reinterpret_cast<half*>(y), M, I);
  }
}

// out[m] = the index of the largest logit of row m, the lowest index on ties; NaN never wins; -1 when the
// whole row is NaN. One block (a multiple of 32 threads, <= 1024; 1024 from LlamaKernels) per row, grid-stride
// over rows.
extern "C" __global__ void llama_argmax(const float* __restrict__ logits, int* __restrict__ out, int M, int V) {
  __shared__ float red_v[32];
  __shared__ int red_i[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int row = blockIdx.x; row < M; row += gridDim.x) {
    const float* lr = logits + (size_t)row * V;
    float bv = -INFINITY;
    int bi = INT_MAX;
    // Unrolled so that several loads are in flight: one row of a 128256-word vocabulary is 125 loads per thread.
#pragma unroll 8
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
      const float x = lr[v];
      if (x > bv || (x == bv && v < bi)) {
        bv = x;
        bi = v;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) {
        bv = ov;
        bi = oi;
      }
    }
    __syncthreads();  // the previous row's thread 0 is done with red_*
    if (lane == 0) {
      red_v[warp] = bv;
      red_i[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const int nw = blockDim.x >> 5;
      for (int w = 1; w < nw; w++) {
        if (red_v[w] > bv || (red_v[w] == bv && red_i[w] < bi)) {
          bv = red_v[w];
          bi = red_i[w];
        }
      }
      out[row] = bi == INT_MAX ? -1 : bi;
    }
  }
}
