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
// - llama_gemm_{128x128,64x64,32x32} are the prefill products: mma.sync m16n8k16 (bf16/fp16 in, fp32 accumulate)
//   fed by ldmatrix from XOR-swizzled shared memory (64-byte rows, no padding, no bank conflicts), K in steps
//   of 32 through a multi-stage cp.async pipeline (3, 4 and 8 stages). Rows past M or N are zero-filled by a
//   cp.async of 0 source bytes from a clamped, valid address: nothing outside the operands is read.
//   Epilogues straight from the accumulator registers, two columns per thread: the three above, and SwiGLU
//   (the block's B tile takes matching gate and up rows, so each thread holds gate and up of the same output
//   column: y = T(silu(T(g)) * T(u)), the rounding points of the unfused llama_swiglu).
// - llama_flash_attention (prefill): FlashAttention-2 on mma.sync. A block is 64 query rows of one head, 16 per
//   warp, Q in registers, K and V tiles of 64 keys in swizzled shared memory (V's load overlaps S = QK^T, the
//   next K's overlaps P.V), online softmax in fp32 in the exp2 domain, P rounded to the 16-bit type for P.V.
//   Rows of several sequences in one tile are served in one pass per cache row, masked by cache row and
//   position; the latest (longest) tiles start first. Any context up to maxT: nothing is kept per key.
// - llama_flash_decode + llama_flash_combine (decode, long context): split-KV. A block takes one row, up to 4
//   query heads of one KV group and 1/gridDim.z of the row's keys (so the split adapts to each row's length),
//   scores 256 keys at a time in shared memory with a running max, and writes its unnormalised fp32 partial
//   (o, max, sum); the combine rescales the splits in split order.

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
constexpr int kEpilogueSwiglu = 3;    // y = T(silu(T(g)) * T(u)) from gate | up rows (tensor-core gemm only)

constexpr int kGemmBk = 32;           // llama_gemm K step: 64 bytes, four 16-byte chunks per tile row

constexpr int kFlashRows = 64;        // llama_flash_attention: query rows per block, 16 per warp
constexpr int kFlashKeys = 64;        //                        keys per K/V tile
constexpr int kFlashWideRows = 128;   // llama_flash_attention_128: the same with 8 warps
constexpr int kFlashMaxD = 128;

constexpr int kDecodeThreads = 128;   // llama_flash_decode
constexpr int kDecodeHeads = 4;       // query heads per block (a slice of one KV group)
constexpr int kDecodePiece = 256;     // keys scored per round
constexpr int kMaxSplits = 128;       // gridDim.z of llama_flash_decode, at most

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


// ---- tensor-core building blocks (sm_80+: cp.async, ldmatrix, mma.sync m16n8k16) ----

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; when !valid nothing is read and the 16 bytes are zeroed. The
// caller passes a valid address either way (the source of a skipped row is clamped into the operand).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem), "r"(bytes));
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem)));
}

// d += a * b for one 16x8x16 tile: a row-major 16x16, b "col" (stored [n][k]), d fp32 16x8.
template <typename T>
__device__ __forceinline__ void mma16816(float* d, const unsigned* a, unsigned b0, unsigned b1);
template <>
__device__ __forceinline__ void mma16816<bf16>(float* d, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<half>(float* d, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as the 16-bit pair of an mma operand register (lower column in the low half).
template <typename T>
__device__ __forceinline__ unsigned pack2(float lo, float hi);
template <>
__device__ __forceinline__ unsigned pack2<bf16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&v);
}
template <>
__device__ __forceinline__ unsigned pack2<half>(float lo, float hi) {
  half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&v);
}

// Element offset of 16-byte chunk `chunk` of row `row` in a tile of 64-byte rows (the gemm's K step): chunks
// are XOR-swizzled so that the 8 rows an ldmatrix phase reads fall in 8 different bank groups.
__device__ __forceinline__ int swz64(int row, int chunk) {
  return row * kGemmBk + ((chunk ^ ((row >> 1) & 3)) << 3);
}

// The same for rows of D 16-bit elements (D = 64 or 128: 8 or 16 chunks).
template <int D>
__device__ __forceinline__ int swzd(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

__device__ __forceinline__ float silu_mul(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

// Outputs (m, n..n+3) of a product from fp32 sums v (n a multiple of 4), those below N. With N a multiple of 4
// the four are one aligned vector access; otherwise one element at a time.
template <typename T>
__device__ __forceinline__ void epilogue4(float4 v, const T* __restrict__ bias, void* __restrict__ out, int m,
                                          int n, int N, int mode, int has_bias) {
  const size_t i = (size_t)m * N + n;
  float a[4] = {v.x, v.y, v.z, v.w};
  if ((N & 3) == 0) {
    if (mode == kEpilogueStore) {
      if (has_bias) {
        const uint2 b = *reinterpret_cast<const uint2*>(bias + n);
        const T* bh = reinterpret_cast<const T*>(&b);
#pragma unroll
        for (int k = 0; k < 4; k++) a[k] += to_f<T>(bh[k]);
      }
      uint2 y;
      y.x = pack2<T>(a[0], a[1]);
      y.y = pack2<T>(a[2], a[3]);
      *reinterpret_cast<uint2*>(reinterpret_cast<T*>(out) + i) = y;
    } else if (mode == kEpilogueResidual) {
      float4* r = reinterpret_cast<float4*>(reinterpret_cast<float*>(out) + i);
      float4 o = *r;
      o.x = o.x + a[0];
      o.y = o.y + a[1];
      o.z = o.z + a[2];
      o.w = o.w + a[3];
      *r = o;
    } else if (mode == kEpilogueFloat) {
      *reinterpret_cast<float4*>(reinterpret_cast<float*>(out) + i) = v;
    }
    return;
  }
  for (int k = 0; k < 4 && n + k < N; k++) epilogue<T>(a[k], bias, out, m, n + k, N, mode, has_bias);
}

// out = epilogue(X W^T): X [M, K], W [N, K]; for kEpilogueSwiglu W is gate | up ([N = 2I, K]) and out [M, I].
// A block computes a BM x BN tile (BN/2 output columns for SwiGLU) with WARPS_M x WARPS_N warps, each a
// (BM/WARPS_M) x (BN/WARPS_N) tile of 16x8 mma tiles. Grid (ceil(N/BN) or ceil(I/(BN/2)), ceil(M/BM)).
template <typename T, int BM, int BN, int WARPS_M, int WARPS_N, int STAGES>
__device__ __forceinline__ void gemm_tc(const T* __restrict__ X, const T* __restrict__ W,
                                        const T* __restrict__ bias, void* __restrict__ out, int M, int N, int K,
                                        int mode, int has_bias, T* smem) {
  constexpr int kThreads = WARPS_M * WARPS_N * 32;
  constexpr int kWm = BM / WARPS_M;
  constexpr int kWn = BN / WARPS_N;
  constexpr int kMi = kWm / 16;
  constexpr int kNi = kWn / 8;
  constexpr int kStageA = BM * kGemmBk;
  constexpr int kStageB = BN * kGemmBk;
  constexpr int kLoadsA = BM * 4 / kThreads;
  constexpr int kLoadsB = BN * 4 / kThreads;
  static_assert(kMi >= 1 && kNi >= 2 && kNi % 2 == 0, "warp tile: at least 16 rows, an even number of n8 tiles");
  static_assert(kLoadsA * kThreads == BM * 4 && kLoadsB * kThreads == BN * 4, "loads must divide evenly");

  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int wm = warp / WARPS_N;
  const int wn = warp - wm * WARPS_N;
  const int m0 = blockIdx.y * BM;
  const bool swiglu = mode == kEpilogueSwiglu;
  const int I = N >> 1;

  // The rows this thread copies each step: the source row (clamped when outside) and where it goes.
  const T* a_src[kLoadsA];
  int a_dst[kLoadsA];
  bool a_ok[kLoadsA];
#pragma unroll
  for (int i = 0; i < kLoadsA; i++) {
    const int e = tid + i * kThreads;
    const int r = e >> 2;
    const int c = e & 3;
    const int m = m0 + r;
    a_ok[i] = m < M;
    a_src[i] = X + (size_t)(a_ok[i] ? m : 0) * K + c * 8;
    a_dst[i] = swz64(r, c);
  }
  const T* b_src[kLoadsB];
  int b_dst[kLoadsB];
  bool b_ok[kLoadsB];
#pragma unroll
  for (int i = 0; i < kLoadsB; i++) {
    const int e = tid + i * kThreads;
    const int r = e >> 2;
    const int c = e & 3;
    int n;
    if (swiglu) {
      // Tile row r feeds warp column r / kWn; its first half are gate rows, its second the matching up rows.
      const int w = r / kWn;
      const int cc = r - w * kWn;
      const int j = blockIdx.x * (BN / 2) + w * (kWn / 2) + (cc % (kWn / 2));
      n = j < I ? (cc < kWn / 2 ? j : I + j) : -1;
    } else {
      n = blockIdx.x * BN + r;
      n = n < N ? n : -1;
    }
    b_ok[i] = n >= 0;
    b_src[i] = W + (size_t)(b_ok[i] ? n : 0) * K + c * 8;
    b_dst[i] = swz64(r, c);
  }

  float acc[kMi][kNi][4];
#pragma unroll
  for (int i = 0; i < kMi; i++) {
#pragma unroll
    for (int j = 0; j < kNi; j++) {
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
    }
  }

  const int steps = K / kGemmBk;
  auto load = [&](int step) {
    T* as = smem + (step % STAGES) * (kStageA + kStageB);
    T* bs = as + kStageA;
    const int k0 = step * kGemmBk;
#pragma unroll
    for (int i = 0; i < kLoadsA; i++) cp_async16(as + a_dst[i], a_src[i] + k0, a_ok[i]);
#pragma unroll
    for (int i = 0; i < kLoadsB; i++) cp_async16(bs + b_dst[i], b_src[i] + k0, b_ok[i]);
  };

#pragma unroll 1
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < steps) load(s);
    cp_async_commit();
  }
  for (int step = 0; step < steps; step++) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // step's stage is in for every thread; every warp is done with the stage refilled next
    if (step + STAGES - 1 < steps) load(step + STAGES - 1);
    cp_async_commit();
    const T* as = smem + (step % STAGES) * (kStageA + kStageB);
    const T* bs = as + kStageA;
#pragma unroll
    for (int kk = 0; kk < kGemmBk / 16; kk++) {
      unsigned af[kMi][4];
      unsigned bf[kNi][2];
#pragma unroll
      for (int i = 0; i < kMi; i++) {
        ldmatrix_x4(af[i], as + swz64(wm * kWm + i * 16 + (lane & 15), kk * 2 + (lane >> 4)));
      }
#pragma unroll
      for (int j = 0; j < kNi; j += 2) {
        unsigned r[4];
        ldmatrix_x4(r, bs + swz64(wn * kWn + j * 8 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)));
        bf[j][0] = r[0];
        bf[j][1] = r[1];
        bf[j + 1][0] = r[2];
        bf[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < kMi; i++) {
#pragma unroll
        for (int j = 0; j < kNi; j++) mma16816<T>(acc[i][j], af[i], bf[j][0], bf[j][1]);
      }
    }
  }
  cp_async_wait<0>();

  // The tile goes out through shared memory (the pipeline's, free now), kRows rows at a time, so that stores are
  // whole rows of 4-column vectors and the epilogue is written once. The row stride of BN + 8 floats keeps each
  // half-warp's 8-byte writes (4 rows x 8 columns) on distinct banks.
  constexpr int kLdc = BN + 8;
  constexpr int kRows = BM * kLdc * 4 <= STAGES * (kStageA + kStageB) * 2 ? BM : BM / 2;
  static_assert(kRows * kLdc * 4 <= STAGES * (kStageA + kStageB) * 2 && kRows % kWm == 0, "epilogue staging");
  float* cs = reinterpret_cast<float*>(smem);
  const int width = swiglu ? BN / 2 : BN;
  const int n0 = blockIdx.x * width;
#pragma unroll 1
  for (int r0 = 0; r0 < BM; r0 += kRows) {
    __syncthreads();  // the pipeline (or the previous rows) is done with the shared memory
    if (wm * kWm >= r0 && wm * kWm < r0 + kRows) {
      // Accumulator (i, j, e): row wm*kWm + i*16 + lane/4 (+8 for e >= 2), column wn*kWn + j*8 + 2*(lane%4) + e%2.
#pragma unroll
      for (int i = 0; i < kMi; i++) {
#pragma unroll
        for (int j = 0; j < kNi; j++) {
          const int r = wm * kWm - r0 + i * 16 + (lane >> 2);
          const int c = wn * kWn + j * 8 + 2 * (lane & 3);
          *reinterpret_cast<float2*>(cs + r * kLdc + c) = make_float2(acc[i][j][0], acc[i][j][1]);
          *reinterpret_cast<float2*>(cs + (r + 8) * kLdc + c) = make_float2(acc[i][j][2], acc[i][j][3]);
        }
      }
    }
    __syncthreads();
#pragma unroll 1
    for (int e = tid; e < kRows * width / 4; e += kThreads) {
      const int r = e / (width / 4);
      const int c = (e - r * (width / 4)) * 4;
      const int m = m0 + r0 + r;
      const int n = n0 + c;
      if (m >= M) break;  // rows only grow with e
      if (swiglu) {
        if (n >= I) continue;
        // Output column c of the tile: warp column c / (kWn/2); gate in its first half, up in its second.
        const int w = c / (kWn / 2);
        const int g = w * kWn + (c - w * (kWn / 2));
        float y[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
          const float gv = to_f<T>(from_f<T>(cs[r * kLdc + g + k]));
          const float uv = to_f<T>(from_f<T>(cs[r * kLdc + g + kWn / 2 + k]));
          y[k] = silu_mul(gv, uv);
        }
        epilogue4<T>(make_float4(y[0], y[1], y[2], y[3]), bias, out, m, n, I, kEpilogueStore, 0);
      } else {
        if (n >= N) continue;
        epilogue4<T>(*reinterpret_cast<const float4*>(cs + r * kLdc + c), bias, out, m, n, N, mode, has_bias);
      }
    }
  }
}

// One 64-row tile of keys or values, [t0, t0 + 64) of a head's cache rows, into swizzled shared memory; keys at
// or past kend are zero-filled without being read.
template <typename T, int D, int THREADS>
__device__ __forceinline__ void load_kv_tile(T* dst, const T* __restrict__ head, int t0, int kend) {
  constexpr int kChunks = D / 8;
  static_assert(kFlashKeys * kChunks % THREADS == 0, "whole rounds of 16-byte copies");
#pragma unroll
  for (int k = 0; k < kFlashKeys * kChunks / THREADS; k++) {
    const int e = threadIdx.x + k * THREADS;
    const int r = e / kChunks;
    const int c = e - r * kChunks;
    const int t = t0 + r;
    const bool ok = t < kend;
    cp_async16(dst + swzd<D>(r, c), head + (size_t)(ok ? t : 0) * D + c * 8, ok);
  }
}

// ROWS query rows per block (64 or 128), a warp per 16 of them: a taller block reads each K/V tile from L2 once
// for more rows. Q is staged through the K and V buffers (ROWS x D elements).
template <typename T, int D, int ROWS>
__device__ __forceinline__ void flash_attention(const T* __restrict__ qkv, const T* __restrict__ kcache,
                                                const T* __restrict__ vcache, T* __restrict__ out,
                                                const int* __restrict__ positions,
                                                const int* __restrict__ cache_rows, int M, int Hq, int Hkv,
                                                int maxT, float scale, T* ks, T* vs, int* meta) {
  constexpr int kChunks = D / 8;
  constexpr int kThreads = ROWS * 2;
  int* crow = meta;                 // [ROWS] cache row of each tile row, -1 past M
  int* cpos = crow + ROWS;          // [ROWS] its position
  int* pass_row = cpos + ROWS;      // [ROWS] the distinct cache rows of the tile
  int* pass_end = pass_row + ROWS;  // [ROWS] 1 + the largest position among the tile's rows of that cache row
  int* passes = pass_end + ROWS;

  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int m0 = (gridDim.x - 1 - blockIdx.x) * ROWS;  // the longest rows (latest tiles) first
  const int h = blockIdx.y;
  const int kv = h / (Hq / Hkv);
  const size_t width = (size_t)(Hq + 2 * Hkv) * D;

  if (tid < ROWS) {
    const int m = m0 + tid;
    crow[tid] = m < M ? cache_rows[m] : -1;
    cpos[tid] = m < M ? positions[m] : -1;
  }
  // Q through the K (and V) buffer, then into registers.
#pragma unroll 1
  for (int k = 0; k < ROWS * kChunks / kThreads; k++) {
    const int e = tid + k * kThreads;
    const int r = e / kChunks;
    const int c = e - r * kChunks;
    const int m = m0 + r;
    const bool ok = m < M;
    cp_async16(ks + swzd<D>(r, c), qkv + (ok ? m : m0) * width + (size_t)h * D + c * 8, ok);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  if (tid == 0) {
    int n = 0;
    for (int r = 0; r < ROWS; r++) {
      const int c = crow[r];
      if (c < 0) continue;
      int p = 0;
      while (p < n && pass_row[p] != c) p++;
      if (p == n) {
        pass_row[n] = c;
        pass_end[n++] = cpos[r] + 1;
      } else {
        pass_end[p] = max(pass_end[p], cpos[r] + 1);
      }
    }
    *passes = n;
  }
  unsigned qf[D / 16][4];
#pragma unroll
  for (int kd = 0; kd < D / 16; kd++) {
    ldmatrix_x4(qf[kd], ks + swzd<D>(warp * 16 + (lane & 15), kd * 2 + (lane >> 4)));
  }
  __syncthreads();  // Q is out of ks; the pass list is written

  const float scale_log2 = scale * 1.4426950408889634f;
  const int r0 = warp * 16 + (lane >> 2);  // this thread's rows: r0 and r0 + 8
  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; j++) {
#pragma unroll
    for (int e = 0; e < 4; e++) o[j][e] = 0.0f;
  }
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};

  const int npass = *passes;
  for (int pass = 0; pass < npass; pass++) {
    const int c = pass_row[pass];
    const int kend = pass_end[pass];
    const size_t head = ((size_t)c * Hkv + kv) * maxT * D;
    const T* kh = kcache + head;
    const T* vh = vcache + head;
    const int pos[2] = {crow[r0] == c ? cpos[r0] : -1, crow[r0 + 8] == c ? cpos[r0 + 8] : -1};
    int warp_last = max(pos[0], pos[1]);
    for (int off = 16; off > 0; off >>= 1) warp_last = max(warp_last, __shfl_xor_sync(0xffffffffu, warp_last, off));
    const int tiles = (kend + kFlashKeys - 1) / kFlashKeys;

    load_kv_tile<T, D, kThreads>(ks, kh, 0, kend);
    cp_async_commit();
    for (int tile = 0; tile < tiles; tile++) {
      const int t0 = tile * kFlashKeys;
      load_kv_tile<T, D, kThreads>(vs, vh, t0, kend);
      cp_async_commit();
      cp_async_wait<1>();  // K of this tile
      __syncthreads();
      const bool active = t0 <= warp_last;  // warp-uniform: some row of this warp sees a key of the tile
      float s[kFlashKeys / 8][4];
      if (active) {
#pragma unroll
        for (int j = 0; j < kFlashKeys / 8; j++) {
#pragma unroll
          for (int e = 0; e < 4; e++) s[j][e] = 0.0f;
        }
#pragma unroll
        for (int kd = 0; kd < D / 16; kd++) {
#pragma unroll
          for (int j = 0; j < kFlashKeys / 8; j += 2) {
            unsigned b[4];
            ldmatrix_x4(b, ks + swzd<D>(j * 8 + (lane & 7) + ((lane >> 4) << 3), kd * 2 + ((lane >> 3) & 1)));
            mma16816<T>(s[j], qf[kd], b[0], b[1]);
            mma16816<T>(s[j + 1], qf[kd], b[2], b[3]);
          }
        }
        // Mask (key after the row's position, or another sequence's row) and scale into the exp2 domain.
#pragma unroll
        for (int j = 0; j < kFlashKeys / 8; j++) {
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int t = t0 + j * 8 + 2 * (lane & 3) + (e & 1);
            s[j][e] = t <= pos[e >> 1] ? s[j][e] * scale_log2 : -INFINITY;
          }
        }
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
          float mx = -INFINITY;
#pragma unroll
          for (int j = 0; j < kFlashKeys / 8; j++) mx = fmaxf(mx, fmaxf(s[j][2 * hr], s[j][2 * hr + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(row_max[hr], mx);
          const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing yet stays at zero
          const float alpha = exp2f(row_max[hr] - m_use);
          row_max[hr] = m_new;
          float sum = 0.0f;
#pragma unroll
          for (int j = 0; j < kFlashKeys / 8; j++) {
            s[j][2 * hr] = exp2f(s[j][2 * hr] - m_use);
            s[j][2 * hr + 1] = exp2f(s[j][2 * hr + 1] - m_use);
            sum += s[j][2 * hr] + s[j][2 * hr + 1];
          }
          row_sum[hr] = row_sum[hr] * alpha + sum;
#pragma unroll
          for (int j = 0; j < D / 8; j++) {
            o[j][2 * hr] *= alpha;
            o[j][2 * hr + 1] *= alpha;
          }
        }
      }
      __syncthreads();  // every warp is done with K
      if (tile + 1 < tiles) load_kv_tile<T, D, kThreads>(ks, kh, t0 + kFlashKeys, kend);
      cp_async_commit();
      cp_async_wait<1>();  // V of this tile
      __syncthreads();
      if (active) {
#pragma unroll
        for (int kk = 0; kk < kFlashKeys / 16; kk++) {
          const unsigned a[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                                 pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                 pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
          for (int j = 0; j < D / 8; j += 2) {
            unsigned b[4];
            ldmatrix_x4_trans(b, vs + swzd<D>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), j + (lane >> 4)));
            mma16816<T>(o[j], a, b[0], b[1]);
            mma16816<T>(o[j + 1], a, b[2], b[3]);
          }
        }
      }
      __syncthreads();  // every warp is done with V
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int hr = 0; hr < 2; hr++) {
    float l = row_sum[hr];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int r = r0 + 8 * hr;
    const int m = m0 + r;
    if (m >= M || crow[r] < 0) continue;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    T* orow = out + (size_t)m * Hq * D + (size_t)h * D;
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
      *reinterpret_cast<unsigned*>(orow + j * 8 + 2 * (lane & 3)) =
          pack2<T>(o[j][2 * hr] * inv, o[j][2 * hr + 1] * inv);
    }
  }
}

// Split-KV decode, one block per (KV head x query-head slice, row, split); see llama_flash_decode.
template <typename T>
__device__ __forceinline__ void flash_decode(const T* __restrict__ qkv, const T* __restrict__ kcache,
                                             const T* __restrict__ vcache, float* __restrict__ partial,
                                             const int* __restrict__ positions,
                                             const int* __restrict__ cache_rows, int M, int Hq, int Hkv, int D,
                                             int maxT, float scale, float* qs, float* ps, float* part,
                                             float* stat) {
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int G = Hq / Hkv;
  const int slices = (G + kDecodeHeads - 1) / kDecodeHeads;
  const int kv = blockIdx.x / slices;
  const int slice = blockIdx.x - kv * slices;
  const int nh = min(kDecodeHeads, G - slice * kDecodeHeads);
  const int h0 = kv * G + slice * kDecodeHeads;
  const int m = blockIdx.y;
  const int split = blockIdx.z;
  const int splits = gridDim.z;
  const int len = positions[m] + 1;
  const int per = (len + splits - 1) / splits;
  const int begin = min(len, split * per);
  const int end = min(len, begin + per);
  const size_t head = ((size_t)cache_rows[m] * Hkv + kv) * maxT * D;
  const T* kh = kcache + head;
  const T* vh = vcache + head;
  float* stat_max = stat;
  float* stat_sum = stat + kDecodeHeads;
  float* stat_scale = stat + 2 * kDecodeHeads;

  const T* q = qkv + (size_t)m * (Hq + 2 * Hkv) * D + (size_t)h0 * D;
  for (int i = tid; i < nh * D; i += kDecodeThreads) qs[i] = to_f<T>(q[i]);
  if (tid < kDecodeHeads) {
    stat_max[tid] = -INFINITY;
    stat_sum[tid] = 0.0f;
  }
  // P.V layout: D/8 lanes cover a value row (8 dims each), `groups` of them take keys g, g + groups, ...
  const int lanes = D / 8;
  const int groups = kDecodeThreads / lanes;
  const int g = tid / lanes;
  const int jd = tid - g * lanes;
  float acc[kDecodeHeads][8];
#pragma unroll
  for (int a = 0; a < kDecodeHeads; a++) {
#pragma unroll
    for (int i = 0; i < 8; i++) acc[a][i] = 0.0f;
  }
  __syncthreads();

  for (int p0 = begin; p0 < end; p0 += kDecodePiece) {
    const int n = min(kDecodePiece, end - p0);
    for (int t = tid; t < n; t += kDecodeThreads) {
      const T* kr = kh + (size_t)(p0 + t) * D;
      float dot[kDecodeHeads] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
      for (int d = 0; d < D; d += 8) {
        float f[8];
        unpack8<T>(*reinterpret_cast<const uint4*>(kr + d), f);
#pragma unroll
        for (int a = 0; a < kDecodeHeads; a++) {
          if (a < nh) {
#pragma unroll
            for (int i = 0; i < 8; i++) dot[a] += qs[a * D + d + i] * f[i];
          }
        }
      }
#pragma unroll
      for (int a = 0; a < kDecodeHeads; a++) {
        if (a < nh) ps[a * kDecodePiece + t] = scale * dot[a];
      }
    }
    __syncthreads();
    if (warp < nh) {  // warp a: head a's running max and sum over this piece
      float* pr = ps + warp * kDecodePiece;
      float mx = -INFINITY;
      for (int t = lane; t < n; t += 32) mx = fmaxf(mx, pr[t]);
      for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_old = stat_max[warp];
      const float m_new = fmaxf(m_old, mx);
      float sum = 0.0f;
      for (int t = lane; t < n; t += 32) {
        const float e = expf(pr[t] - m_new);
        pr[t] = e;
        sum += e;
      }
      for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      if (lane == 0) {
        const float alpha = expf(m_old - m_new);
        stat_scale[warp] = alpha;
        stat_sum[warp] = stat_sum[warp] * alpha + sum;
        stat_max[warp] = m_new;
      }
    }
    __syncthreads();
    if (g < groups) {
#pragma unroll
      for (int a = 0; a < kDecodeHeads; a++) {
        if (a < nh) {
          const float alpha = stat_scale[a];
#pragma unroll
          for (int i = 0; i < 8; i++) acc[a][i] *= alpha;
        }
      }
#pragma unroll 2
      for (int t = g; t < n; t += groups) {
        float f[8];
        unpack8<T>(*reinterpret_cast<const uint4*>(vh + (size_t)(p0 + t) * D + 8 * jd), f);
#pragma unroll
        for (int a = 0; a < kDecodeHeads; a++) {
          if (a < nh) {
            const float pt = ps[a * kDecodePiece + t];
#pragma unroll
            for (int i = 0; i < 8; i++) acc[a][i] += pt * f[i];
          }
        }
      }
    }
    __syncthreads();  // ps is rewritten by the next piece
  }

  if (g < groups) {
#pragma unroll
    for (int a = 0; a < kDecodeHeads; a++) {
      if (a < nh) {
#pragma unroll
        for (int i = 0; i < 8; i++) part[(g * kDecodeHeads + a) * D + 8 * jd + i] = acc[a][i];
      }
    }
  }
  __syncthreads();
  const size_t rows = (size_t)M * Hq * splits;
  for (int i = tid; i < nh * D; i += kDecodeThreads) {
    const int a = i / D;
    const int d = i - a * D;
    float o = 0.0f;
    for (int k = 0; k < groups; k++) o += part[(k * kDecodeHeads + a) * D + d];
    partial[(((size_t)m * Hq + h0 + a) * splits + split) * D + d] = o;
  }
  if (tid < nh) {
    float* ml = partial + rows * D + (((size_t)m * Hq + h0 + tid) * splits + split) * 2;
    ml[0] = stat_max[tid];
    ml[1] = stat_sum[tid];
  }
}

template <typename T>
__device__ __forceinline__ void flash_combine(const float* __restrict__ partial, T* __restrict__ out, int M,
                                              int Hq, int D, int splits, float* w) {
  const int h = blockIdx.x;
  const int m = blockIdx.y;
  const size_t mh = (size_t)m * Hq + h;
  const float* ml = partial + (size_t)M * Hq * splits * D + mh * splits * 2;
  float mx = -INFINITY;
  for (int s = 0; s < splits; s++) mx = fmaxf(mx, ml[2 * s]);
  for (int s = threadIdx.x; s < splits; s += blockDim.x) w[s] = mx == -INFINITY ? 0.0f : expf(ml[2 * s] - mx);
  __syncthreads();
  float sum = 0.0f;
  for (int s = 0; s < splits; s++) sum += ml[2 * s + 1] * w[s];
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  const float* po = partial + mh * splits * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < splits; s++) o += po[(size_t)s * D + d] * w[s];
    out[mh * D + d] = from_f<T>(o * inv);
  }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// ---- Hopper products (sm_90a only): wgmma from shared memory, fed by cp.async ----
//
// wgmma.mma_async reads both operands from shared memory through 64-bit descriptors; only the cp.async copies
// that fill it touch global memory, so the instrumenter sees every global access (no TMA: its global ranges
// would go unchecked). A block of WG warpgroups computes a (64 WG) x BN tile, warpgroup g the rows 64g.. of it
// with one m64nBNk16 instruction per 16 of K; the accumulators stay in registers, (BN/2) floats per thread.

constexpr int kWgBk = 64;          // K step: one 128-byte row per tile row, the width of the 128-byte swizzle
constexpr int kWgGroupRows = 16;   // row tiles per raster group (see gemm_wgmma)

// Descriptor of a K-major tile of 128-byte rows in the 128-byte swizzle: 8-row atoms of 1024 bytes, one atom
// every 1024 bytes (stride byte offset); the leading byte offset is unused in this layout (1 by convention).
// `addr` is the tile's shared address, 1024-aligned, plus 32 bytes for each 16 of K into the row.
__device__ __forceinline__ uint64_t wgmma_desc(unsigned addr) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
         ((uint64_t)1 << 62);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most N of this warpgroup's committed wgmma groups are in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Makes this thread's completed shared-memory writes (cp.async included) visible to the async proxy that
// wgmma reads its operands through; a barrier after it publishes them to the other threads' wgmma.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// After wgmma_wait<0>: the accumulators as values defined here, so that no read of them is scheduled above
// the wait (the wgmma that writes them is asynchronous; the compiler knows only the asm statements' order).
template <int R>
__device__ __forceinline__ void wgmma_pin(float* d) {
#pragma unroll
  for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// d (64 x N fp32, N/2 per thread) += A (64 x 16, descriptor a) * B (16 x N, K-major rows, descriptor b).
template <typename T, int N>
__device__ __forceinline__ void wgmma_ss(float* d, uint64_t a, uint64_t b);

// The 128 accumulator registers of an m64n256k16 wgmma: the operand list, then the asm outputs.
#define THAW_WGMMA_D128 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

#define THAW_WGMMA_OUT128 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// The 64 accumulator registers of an m64n128k16 wgmma: the operand list, then the asm outputs.
#define THAW_WGMMA_D64 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

#define THAW_WGMMA_OUT64 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// One specialisation of wgmma_ss: T the C++ type, PT its PTX name, N the tile's columns, R = N/2 registers, then
// the operand numbers of the two descriptors (R and R + 1).
#define THAW_WGMMA_SS(T, PT, N, R, DA, DB)                                                            \
  template <>                                                                                         \
  __device__ __forceinline__ void wgmma_ss<T, N>(float* d, uint64_t a, uint64_t b) {                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                          \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PT "." PT " {" THAW_WGMMA_D##R     \
                 "}, %" #DA ", %" #DB ", p, 1, 1, 0, 0;\n}\n"                                         \
                 : THAW_WGMMA_OUT##R                                                                  \
                 : "l"(a), "l"(b));                                                                   \
  }

THAW_WGMMA_SS(bf16, "bf16", 256, 128, 128, 129)
THAW_WGMMA_SS(half, "f16", 256, 128, 128, 129)
THAW_WGMMA_SS(bf16, "bf16", 128, 64, 64, 65)
THAW_WGMMA_SS(half, "f16", 128, 64, 64, 65)

#undef THAW_WGMMA_SS
#undef THAW_WGMMA_D128
#undef THAW_WGMMA_OUT128
#undef THAW_WGMMA_D64
#undef THAW_WGMMA_OUT64

// out = epilogue(X W^T) on wgmma, any M: X [M, K], W [N, K] (for SwiGLU gate | up [N = 2I, K], out [M, I]).
// Block: WG warpgroups, a (64 WG) x BN tile (BN/2 output columns for SwiGLU: the first BN/2 rows of the W tile
// are gate rows, the rest the matching up rows, so each thread holds gate and up of its output columns). K in
// steps of 64 through STAGES shared-memory stages, STAGES - 2 of them loading ahead of the one computed while
// the previous step's wgmma still runs. Rows past M or N and K past K are zero-filled by cp.async of 0 bytes
// from an address inside the operand. 1-D grid of ceil(M / 64 WG) x (column tiles) blocks, rastered in groups
// of kWgGroupRows row tiles, row tiles fastest: the blocks resident at once share a few column tiles of W,
// read once from DRAM, and the group's rows of X. Dynamic shared memory: STAGES (64 WG + BN) 128 + 1024 bytes.
template <typename T, int BN, int WG, int STAGES>
__device__ __forceinline__ void gemm_wgmma(const T* __restrict__ X, const T* __restrict__ W,
                                           const T* __restrict__ bias, void* __restrict__ out, int M, int N,
                                           int K, int mode, int has_bias, unsigned char* smem_raw) {
  constexpr int BM = 64 * WG;
  constexpr int kThreads = 128 * WG;
  constexpr int kStageA = BM * kWgBk;  // 16-bit elements
  constexpr int kStageB = BN * kWgBk;
  constexpr int kRowsPerPass = kThreads / 8;  // tile rows one round of 16-byte copies covers
  constexpr int kLoadsA = BM / kRowsPerPass;
  constexpr int kLoadsB = BN / kRowsPerPass;
  constexpr int kAcc = BN / 2;
  static_assert(kLoadsA * kRowsPerPass == BM && kLoadsB * kRowsPerPass == BN, "whole rounds of copies");
  static_assert(kRowsPerPass % 8 == 0, "a thread's rows share their swizzle");
  static_assert(STAGES >= 3, "a stage computed, one draining, one loading");

  // The stages start on a 1024-byte boundary: the swizzle's atoms are addressed from there.
  const unsigned raw = smem_u32(smem_raw);
  T* smem = reinterpret_cast<T*>(smem_raw + (((raw + 1023u) & ~1023u) - raw));
  const unsigned base = smem_u32(smem);

  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  const bool swiglu = mode == kEpilogueSwiglu;
  const int I = N >> 1;
  const int width = swiglu ? BN / 2 : BN;
  const int outN = swiglu ? I : N;
  const int tilesM = (M + BM - 1) / BM;
  const int tilesN = (outN + width - 1) / width;
  int tm;
  int tn;
  {
    const int perGroup = kWgGroupRows * tilesN;
    const int g = blockIdx.x / perGroup;
    const int first = g * kWgGroupRows;
    const int rows = min(kWgGroupRows, tilesM - first);
    const int r = blockIdx.x - g * perGroup;
    tm = first + r % rows;
    tn = r / rows;
  }
  const int m0 = tm * BM;
  const int c0 = tn * width;

  // Copies: 8 threads per tile row, thread tid takes 16-byte chunk tid % 8 of rows tid / 8 + i * kRowsPerPass;
  // chunk c of row r lands at chunk c ^ (r % 8) of the row (the 128-byte swizzle).
  const int chunk = tid & 7;
  const int row0 = tid >> 3;
  const int swz = row0 * kWgBk + ((chunk ^ (row0 & 7)) << 3);
  const T* aRow[kLoadsA];
  bool aOk[kLoadsA];
#pragma unroll
  for (int i = 0; i < kLoadsA; i++) {
    const int m = m0 + row0 + i * kRowsPerPass;
    aOk[i] = m < M;
    aRow[i] = X + (size_t)(aOk[i] ? m : 0) * K;
  }
  const T* bRow[kLoadsB];
  bool bOk[kLoadsB];
#pragma unroll
  for (int i = 0; i < kLoadsB; i++) {
    const int r = row0 + i * kRowsPerPass;
    int n;
    if (swiglu) {
      const int j = c0 + (r < BN / 2 ? r : r - BN / 2);
      n = j < I ? (r < BN / 2 ? j : I + j) : -1;
    } else {
      n = c0 + r < N ? c0 + r : -1;
    }
    bOk[i] = n >= 0;
    bRow[i] = W + (size_t)(bOk[i] ? n : 0) * K;
  }

  auto load = [&](int step) {
    T* as = smem + (step % STAGES) * (kStageA + kStageB);
    T* bs = as + kStageA;
    const int k = step * kWgBk + chunk * 8;
    const bool kOk = k < K;
    const int at = kOk ? k : 0;  // a chunk past K reads nothing; its address stays at the row's start
#pragma unroll
    for (int i = 0; i < kLoadsA; i++) cp_async16(as + swz + i * kRowsPerPass * kWgBk, aRow[i] + at, aOk[i] && kOk);
#pragma unroll
    for (int i = 0; i < kLoadsB; i++) cp_async16(bs + swz + i * kRowsPerPass * kWgBk, bRow[i] + at, bOk[i] && kOk);
  };

  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; i++) acc[i] = 0.0f;

  const int steps = (K + kWgBk - 1) / kWgBk;
#pragma unroll 1
  for (int s = 0; s < STAGES - 2; s++) {
    if (s < steps) load(s);
    cp_async_commit();
  }
#pragma unroll 1
  for (int step = 0; step < steps; step++) {
    cp_async_wait<STAGES - 3>();  // this thread's copies of `step` are in
    fence_proxy_async();
    // Every thread's copies of `step` are in and visible to wgmma; every warpgroup has waited for its wgmma of
    // step - 2, so that stage may be refilled.
    __syncthreads();
    if (step + STAGES - 2 < steps) load(step + STAGES - 2);
    cp_async_commit();
    const unsigned stage = base + (unsigned)((step % STAGES) * (kStageA + kStageB) * 2);
    const unsigned a = stage + (unsigned)(wg * 64 * kWgBk * 2);
    const unsigned b = stage + (unsigned)(kStageA * 2);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kWgBk / 16; kk++) wgmma_ss<T, BN>(acc, wgmma_desc(a + kk * 32), wgmma_desc(b + kk * 32));
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  wgmma_pin<kAcc>(acc);
  cp_async_wait<0>();

  // The tile goes out through the stages' shared memory, as in gemm_tc: whole rows of 4-column vectors. Thread
  // (warp w of its warpgroup, lane l) holds rows 64 wg + 16 w + l/4 (+8) and, of each 8 columns j, 2 (l % 4)
  // and the next: acc[4j + e] is row + 8 (e / 2), column 8j + 2 (l % 4) + e % 2. A row stride of BN + 8
  // floats keeps each half-warp's 8-byte writes on distinct banks.
  constexpr int kLdc = BN + 8;
  static_assert(BM * kLdc * 4 <= STAGES * (kStageA + kStageB) * 2, "epilogue staging");
  float* cs = reinterpret_cast<float*>(smem);
  __syncthreads();  // every warpgroup's wgmma is done with the stages
  {
    const int lane = tid & 31;
    const int r = wg * 64 + ((tid & 127) >> 5) * 16 + (lane >> 2);
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
      const int c = j * 8 + 2 * (lane & 3);
      *reinterpret_cast<float2*>(cs + r * kLdc + c) = make_float2(acc[4 * j], acc[4 * j + 1]);
      *reinterpret_cast<float2*>(cs + (r + 8) * kLdc + c) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
  __syncthreads();
#pragma unroll 1
  for (int e = tid; e < BM * width / 4; e += kThreads) {
    const int r = e / (width / 4);
    const int c = (e - r * (width / 4)) * 4;
    const int m = m0 + r;
    const int n = c0 + c;
    if (m >= M) break;  // rows only grow with e
    if (n >= outN) continue;
    if (swiglu) {
      float y[4];
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const float gv = to_f<T>(from_f<T>(cs[r * kLdc + c + k]));
        const float uv = to_f<T>(from_f<T>(cs[r * kLdc + BN / 2 + c + k]));
        y[k] = silu_mul(gv, uv);
      }
      epilogue4<T>(make_float4(y[0], y[1], y[2], y[3]), bias, out, m, n, I, kEpilogueStore, 0);
    } else {
      epilogue4<T>(*reinterpret_cast<const float4*>(cs + r * kLdc + c), bias, out, m, n, N, mode, has_bias);
    }
  }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

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

// ---- prefill and long-context kernels on the tensor cores ----

// out = epilogue(X W^T) on the tensor cores, any M (llama_gemm_<BM>x<BN>): X [M, K], W [N, K], out [M, N]; with
// mode 3 (SwiGLU) W is gate | up rows ([N, K], N = 2I even) and out [M, I] = T(silu(T(g)) * T(u)). Grid
// (ceil(N/BN), ceil(M/BM)), for SwiGLU (ceil(I/(BN/2)), ceil(M/BM)); threads as each entry says. K a multiple
// of 32; X and W 16-byte aligned; out 16-byte aligned.
#define THAW_GEMM_ENTRY(NAME, BM, BN, WM, WN, STAGES, MIN_BLOCKS)                                              \
  extern "C" __global__ void __launch_bounds__((WM) * (WN) * 32, MIN_BLOCKS)                                   \
      NAME(const void* __restrict__ X, const void* __restrict__ W, const void* __restrict__ bias,               \
           void* __restrict__ out, int M, int N, int K, int mode, int has_bias, int bf16) {                    \
    __shared__ __align__(128) unsigned char smem[(STAGES) * ((BM) + (BN)) * kGemmBk * 2];                      \
    if (bf16) {                                                                                                \
      gemm_tc<thaw_llama::bf16, BM, BN, WM, WN, STAGES>(                                                       \
          reinterpret_cast<const thaw_llama::bf16*>(X), reinterpret_cast<const thaw_llama::bf16*>(W),          \
          reinterpret_cast<const thaw_llama::bf16*>(bias), out, M, N, K, mode, has_bias,                       \
          reinterpret_cast<thaw_llama::bf16*>(smem));                                                          \
    } else {                                                                                                   \
      gemm_tc<half, BM, BN, WM, WN, STAGES>(reinterpret_cast<const half*>(X), reinterpret_cast<const half*>(W), \
                                            reinterpret_cast<const half*>(bias), out, M, N, K, mode, has_bias, \
                                            reinterpret_cast<half*>(smem));                                    \
    }                                                                                                          \
  }

// 256 threads, 8 warps of 64x32, 3 stages (48 KiB): long prompts.
THAW_GEMM_ENTRY(llama_gemm_128x128, 128, 128, 2, 4, 3, 2)
// 128 threads, 4 warps of 32x32, 4 stages (32 KiB): a few hundred rows.
THAW_GEMM_ENTRY(llama_gemm_64x64, 64, 64, 2, 2, 4, 4)
// 64 threads, 2 warps of 32x16, 8 stages (32 KiB): tens of rows, where the product streams W.
THAW_GEMM_ENTRY(llama_gemm_32x32, 32, 32, 1, 2, 8, 6)

#undef THAW_GEMM_ENTRY

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// out = epilogue(X W^T) on wgmma (llama_wgmma_<BM>x<BN>, Hopper only: in the sm_90a build of this file), the
// function and arguments of llama_gemm_*: 1-D grid of ceil(M/BM) * (column tiles) blocks (column tiles:
// ceil(N/BN), for SwiGLU ceil(I/(BN/2))), 128 threads per warpgroup, STAGES (BM + BN) 128 + 1024 bytes of
// dynamic shared memory (above 48 KiB: the launcher raises the kernel's limit once). K a multiple of 8 (the
// launcher asks 32); X, W and out 16-byte aligned.
#define THAW_WGMMA_ENTRY(NAME, BN, WG, STAGES, MIN_BLOCKS)                                                     \
  extern "C" __global__ void __launch_bounds__((WG) * 128, MIN_BLOCKS)                                         \
      NAME(const void* __restrict__ X, const void* __restrict__ W, const void* __restrict__ bias,               \
           void* __restrict__ out, int M, int N, int K, int mode, int has_bias, int bf16) {                    \
    extern __shared__ __align__(128) unsigned char smem[];                                                     \
    if (bf16) {                                                                                                \
      gemm_wgmma<thaw_llama::bf16, BN, WG, STAGES>(                                                            \
          reinterpret_cast<const thaw_llama::bf16*>(X), reinterpret_cast<const thaw_llama::bf16*>(W),          \
          reinterpret_cast<const thaw_llama::bf16*>(bias), out, M, N, K, mode, has_bias, smem);                \
    } else {                                                                                                   \
      gemm_wgmma<half, BN, WG, STAGES>(reinterpret_cast<const half*>(X), reinterpret_cast<const half*>(W),     \
                                       reinterpret_cast<const half*>(bias), out, M, N, K, mode, has_bias,      \
                                       smem);                                                                  \
    }                                                                                                          \
  }

// 2 warpgroups of 64x256, 4 stages (193 KiB, one block per SM): long prompts.
THAW_WGMMA_ENTRY(llama_wgmma_128x256, 256, 2, 4, 1)
// 2 warpgroups of 64x128, 3 stages (97 KiB, two blocks per SM).
THAW_WGMMA_ENTRY(llama_wgmma_128x128, 128, 2, 3, 2)
// 1 warpgroup of 64x128, 4 stages (97 KiB, two blocks per SM): a few hundred rows.
THAW_WGMMA_ENTRY(llama_wgmma_64x128, 128, 1, 4, 2)

#undef THAW_WGMMA_ENTRY
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Causal grouped-query attention for a prompt pass, FlashAttention-2 style: out[m, h*D + d] as llama_attention
// computes it (softmax(scale q.k_t) over cache positions 0..positions[m] of cache row cache_rows[m], KV head
// h / (Hq/Hkv)), for any positions[m] < maxT. llama_flash_attention: grid (ceil(M/64), Hq), 128 threads;
// llama_flash_attention_128: grid (ceil(M/128), Hq), 256 threads (each K/V tile serves twice the rows: half the
// L2 traffic of long prompts). D 64 or 128; qkv, the caches and out 16-byte aligned. Run llama_rope_kv first.
// Rows of one sequence should be consecutive (a tile with rows of k cache rows makes k passes).
template <int ROWS>
__device__ __forceinline__ void flash_attention_entry(const void* __restrict__ qkv, const void* __restrict__ kcache,
                                                      const void* __restrict__ vcache, void* __restrict__ out,
                                                      const int* __restrict__ positions,
                                                      const int* __restrict__ cache_rows, int M, int Hq, int Hkv,
                                                      int D, int maxT, float scale, int bf16, unsigned char* smem,
                                                      int* meta) {
  if (bf16) {
    typedef thaw_llama::bf16 T;
    T* ks = reinterpret_cast<T*>(smem);
    if (D == 128) {
      flash_attention<T, 128, ROWS>(reinterpret_cast<const T*>(qkv), reinterpret_cast<const T*>(kcache),
                                    reinterpret_cast<const T*>(vcache), reinterpret_cast<T*>(out), positions,
                                    cache_rows, M, Hq, Hkv, maxT, scale, ks, ks + kFlashKeys * 128, meta);
    } else {
      flash_attention<T, 64, ROWS>(reinterpret_cast<const T*>(qkv), reinterpret_cast<const T*>(kcache),
                                   reinterpret_cast<const T*>(vcache), reinterpret_cast<T*>(out), positions,
                                   cache_rows, M, Hq, Hkv, maxT, scale, ks, ks + kFlashKeys * 64, meta);
    }
  } else {
    half* ks = reinterpret_cast<half*>(smem);
    if (D == 128) {
      flash_attention<half, 128, ROWS>(reinterpret_cast<const half*>(qkv), reinterpret_cast<const half*>(kcache),
                                       reinterpret_cast<const half*>(vcache), reinterpret_cast<half*>(out),
                                       positions, cache_rows, M, Hq, Hkv, maxT, scale, ks, ks + kFlashKeys * 128,
                                       meta);
    } else {
      flash_attention<half, 64, ROWS>(reinterpret_cast<const half*>(qkv), reinterpret_cast<const half*>(kcache),
                                      reinterpret_cast<const half*>(vcache), reinterpret_cast<half*>(out),
                                      positions, cache_rows, M, Hq, Hkv, maxT, scale, ks, ks + kFlashKeys * 64,
                                      meta);
    }
  }
}

// K and V tiles of 64 keys (32 KiB for D 128), Q staged through both (up to 128 x 128 elements).
static_assert(kFlashWideRows * kFlashMaxD <= 2 * kFlashKeys * kFlashMaxD, "Q fits the K and V buffers");

extern "C" __global__ void __launch_bounds__(2 * kFlashRows)
    llama_flash_attention(const void* __restrict__ qkv, const void* __restrict__ kcache,
                          const void* __restrict__ vcache, void* __restrict__ out,
                          const int* __restrict__ positions, const int* __restrict__ cache_rows, int M, int Hq,
                          int Hkv, int D, int maxT, float scale, int bf16) {
  __shared__ __align__(128) unsigned char smem[2 * kFlashKeys * kFlashMaxD * 2];
  __shared__ int meta[4 * kFlashRows + 1];
  flash_attention_entry<kFlashRows>(qkv, kcache, vcache, out, positions, cache_rows, M, Hq, Hkv, D, maxT, scale,
                                    bf16, smem, meta);
}

extern "C" __global__ void __launch_bounds__(2 * kFlashWideRows, 1)
    llama_flash_attention_128(const void* __restrict__ qkv, const void* __restrict__ kcache,
                              const void* __restrict__ vcache, void* __restrict__ out,
                              const int* __restrict__ positions, const int* __restrict__ cache_rows, int M,
                              int Hq, int Hkv, int D, int maxT, float scale, int bf16) {
  __shared__ __align__(128) unsigned char smem[2 * kFlashKeys * kFlashMaxD * 2];
  __shared__ int meta[4 * kFlashWideRows + 1];
  flash_attention_entry<kFlashWideRows>(qkv, kcache, vcache, out, positions, cache_rows, M, Hq, Hkv, D, maxT,
                                        scale, bf16, smem, meta);
}

// Split-KV attention for decode, first half: row m's keys 0..positions[m] are cut into gridDim.z near-equal
// ranges; the block (x = KV head * ceil(G/4) + slice of up to 4 of its G = Hq/Hkv query heads, y = row, z =
// range) writes for each of its heads h the unnormalised fp32 partial: o[d] = sum_t exp(s_t - mx) v_t[d],
// mx = max_t s_t, l = sum_t exp(s_t - mx), s_t = scale q.k_t (an empty range: o = 0, mx = -inf, l = 0).
// partial is fp32 [M, Hq, splits, D] of o, then [M, Hq, splits, 2] of (mx, l). Grid (Hkv ceil(G/4), M,
// splits <= 128), 128 threads. D a multiple of 8, <= 256; qkv and the caches 16-byte aligned.
extern "C" __global__ void __launch_bounds__(kDecodeThreads)
    llama_flash_decode(const void* __restrict__ qkv, const void* __restrict__ kcache,
                       const void* __restrict__ vcache, float* __restrict__ partial,
                       const int* __restrict__ positions, const int* __restrict__ cache_rows, int M, int Hq,
                       int Hkv, int D, int maxT, float scale, int bf16) {
  __shared__ float qs[kDecodeHeads * kMaxD];
  __shared__ float ps[kDecodeHeads * kDecodePiece];
  __shared__ float part[kDecodeHeads * 8 * kDecodeThreads];  // groups x heads x D <= heads x 8 x threads
  __shared__ float stat[3 * kDecodeHeads];
  if (bf16) {
    flash_decode<thaw_llama::bf16>(reinterpret_cast<const thaw_llama::bf16*>(qkv),
                                   reinterpret_cast<const thaw_llama::bf16*>(kcache),
                                   reinterpret_cast<const thaw_llama::bf16*>(vcache), partial, positions,
                                   cache_rows, M, Hq, Hkv, D, maxT, scale, qs, ps, part, stat);
  } else {
    flash_decode<half>(reinterpret_cast<const half*>(qkv), reinterpret_cast<const half*>(kcache),
                       reinterpret_cast<const half*>(vcache), partial, positions, cache_rows, M, Hq, Hkv, D, maxT,
                       scale, qs, ps, part, stat);
  }
}

// Second half: out[m, h*D + d] = T(sum_s o_s[d] w_s / sum_s l_s w_s), w_s = exp(mx_s - max_s mx_s), splits
// in order. Grid (Hq, M), 128 threads; splits <= 128, as llama_flash_decode wrote them.
extern "C" __global__ void __launch_bounds__(kDecodeThreads)
    llama_flash_combine(const float* __restrict__ partial, void* __restrict__ out, int M, int Hq, int D,
                        int splits, int bf16) {
  __shared__ float w[kMaxSplits];
  if (bf16) {
    flash_combine<thaw_llama::bf16>(partial, reinterpret_cast<thaw_llama::bf16*>(out), M, Hq, D, splits, w);
  } else {
    flash_combine<half>(partial, reinterpret_cast<half*>(out), M, Hq, D, splits, w);
  }
}
