// GPT-2 inference kernels: fp16 weights and activations, fp32 accumulation and residual stream.
//
// Their Java twins for the simulated device are dev.thaw.examples.gpt2.kernels.*SimKernel; the host wrapper
// that checks shapes and launches them is dev.thaw.examples.gpt2.kernels.Gpt2Kernels. Keep the three in step
// and regenerate the checked-in PTX with build-ptx.sh after an edit (a test compares them).
//
// Notation: C = n_embd, H = heads, D = C / H (64 in every GPT-2 size), V = vocabulary, M = token rows in this
// call (B*T for a prompt, B for a decode step). All matrices are row-major; `half` is IEEE binary16.
//
// Design
// - Every kernel touches exactly the bytes its Java twin touches (the sim device records byte ranges and the
//   runtime validates access speculation against them): rows >= M of a padded tile are never loaded, only
//   the k/v part of a qkv row is read by gpt2_kv_append, only the q part by gpt2_attention.
// - Nothing here uses atomics or depends on scheduling order: every output element is produced by one thread
//   and every sum is taken in a fixed order, so a kernel gives the same bits on every run.
// - Matmuls (gpt2_matmul, gpt2_matmul_residual, gpt2_lm_head) run on the tensor cores through WMMA 16x16x16
//   (half x half -> float). A block of 8 warps owns one 16x16 output tile and splits K between its warps
//   (warp w takes k-chunks w, w+8, ...; intra-block split-K). Each warp stages its chunk of X and W in its
//   own shared-memory slots with one 16-byte load per lane per operand, prefetching the next chunk into
//   registers while the current one is multiplied; no block-wide barrier inside the K loop. The 8 partial
//   tiles are summed in warp order in shared memory and the epilogue (bias, GELU, fp16 rounding or the
//   fp32 residual update) is one thread per output element. Small tiles are chosen for decode (M = 1..16),
//   where the matmul is a stream over W: N/16 blocks of 256 threads (80 for N = 1280, 320 for N = 5120)
//   keep every SM of an H100/H200 pulling W. Rows are padded to 16 with zeros (never read from memory).
//   16-byte loads need X, W, wte 16-byte aligned; the host wrapper checks it.
// - gpt2_attention: one block per (head, row); scores for the causal window in shared memory (<= 1024),
//   softmax with max subtraction, then P.V with threads over d. kcache/vcache are [B, H, maxT, D].
// - Elementwise kernels are grid-stride: any grid covers the whole range.

#include <cuda_fp16.h>
#include <mma.h>
#include <stdint.h>

#include <climits>
#include <type_traits>

using namespace nvcuda;

// Helpers live in a named namespace, not an anonymous one: nvcc mangles anonymous-namespace names with a
// hash of the source path, which would make the checked-in PTX differ from checkout to checkout.
namespace thaw_gpt2 {

constexpr int kWarps = 8;                 // warps per matmul block (split-K factor)
constexpr int kMatmulThreads = kWarps * 32;
constexpr int kTile = 16;                 // WMMA m = n = k
constexpr int kMaxT = 1024;               // longest context gpt2_attention supports
constexpr int kMaxD = 128;                // largest head size gpt2_attention supports
constexpr int kAttnThreads = 128;

constexpr int kEpilogueHalf = 0;          // Y = half(acc + bias)
constexpr int kEpilogueGelu = 1;          // Y = half(gelu_new(acc + bias))
constexpr int kEpilogueResidual = 2;      // R = R + (acc + bias)

__device__ __forceinline__ float gelu_new(float x) {
  const float kSqrt2OverPi = 0.7978845608028654f;
  float inner = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
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

// The shared core of the three matmuls: one 16x16 tile of X[M,K] . B[K,N] for block (blockIdx.x, blockIdx.y).
// B_COL_MAJOR = false: B is W[K,N] row-major (Conv1D). B_COL_MAJOR = true: B is wte[N,K] row-major, i.e. B
// col-major with ldm K (the tied lm_head). Returns, in thread t of 256, the fp32 sum for tile element
// (t / 16, t % 16), summed over the 8 warps in warp order.
template <bool B_COL_MAJOR>
__device__ __forceinline__ float matmul_tile(const half* __restrict__ X, const half* __restrict__ B, int M, int N,
                                             int K) {
  __shared__ __align__(32) half xs[kWarps][kTile * kTile];
  __shared__ __align__(32) half bs[kWarps][kTile * kTile];
  __shared__ __align__(32) float part[kWarps][kTile * kTile];

  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int m0 = blockIdx.y * kTile;
  const int n0 = blockIdx.x * kTile;
  // Each lane moves 8 halves (16 bytes) of each operand: row r of the staged 16x16 chunk, columns c8..c8+7.
  const int r = lane >> 1;
  const int c8 = (lane & 1) * 8;
  const bool x_row_ok = m0 + r < M;
  const bool b_row_ok = !B_COL_MAJOR || n0 + r < N;  // lm_head: row r of the chunk is vocabulary entry n0+r
  const half* x_src = X + (size_t)(m0 + r) * K + c8;
  const half* b_src = B_COL_MAJOR ? B + (size_t)(n0 + r) * K + c8 : B + (size_t)r * N + n0 + c8;
  const size_t b_chunk_stride = B_COL_MAJOR ? (size_t)kTile : (size_t)kTile * N;

  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a_frag;
  typedef typename std::conditional<B_COL_MAJOR, wmma::col_major, wmma::row_major>::type b_layout;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, b_layout> b_frag;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);

  const int nk = K / kTile;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  uint4 xa = zero;
  uint4 ba = zero;
  int kc = warp;
  if (kc < nk) {
    if (x_row_ok) xa = *reinterpret_cast<const uint4*>(x_src + (size_t)kc * kTile);
    if (b_row_ok) ba = *reinterpret_cast<const uint4*>(b_src + (size_t)kc * b_chunk_stride);
  }
  for (; kc < nk; kc += kWarps) {
    *reinterpret_cast<uint4*>(&xs[warp][r * kTile + c8]) = xa;
    *reinterpret_cast<uint4*>(&bs[warp][r * kTile + c8]) = ba;
    __syncwarp();
    const int kn = kc + kWarps;
    if (kn < nk) {
      if (x_row_ok) xa = *reinterpret_cast<const uint4*>(x_src + (size_t)kn * kTile);
      if (b_row_ok) ba = *reinterpret_cast<const uint4*>(b_src + (size_t)kn * b_chunk_stride);
    }
    // Staged as [row][col] with 16 columns: A is row-major; B is row-major [k][n] for W, and [n][k] — that
    // is col-major [k][n] — for wte.
    wmma::load_matrix_sync(a_frag, xs[warp], kTile);
    wmma::load_matrix_sync(b_frag, bs[warp], kTile);
    wmma::mma_sync(acc, a_frag, b_frag, acc);
    __syncwarp();  // the next iteration overwrites this warp's slots
  }
  wmma::store_matrix_sync(part[warp], acc, kTile, wmma::mem_row_major);
  __syncthreads();
  float s = 0.0f;
  for (int w = 0; w < kWarps; w++) s += part[w][threadIdx.x];
  return s;
}

template <int EPILOGUE>
__device__ __forceinline__ void matmul_conv1d(const half* __restrict__ X, const half* __restrict__ W,
                                              const half* __restrict__ bias, half* __restrict__ Y,
                                              float* __restrict__ R, int M, int N, int K) {
  float s = matmul_tile<false>(X, W, M, N, K);
  const int m = blockIdx.y * kTile + (threadIdx.x >> 4);
  const int n = blockIdx.x * kTile + (threadIdx.x & 15);
  if (m < M) {
    float v = s + __half2float(bias[n]);
    size_t i = (size_t)m * N + n;
    if (EPILOGUE == kEpilogueResidual) {
      R[i] = R[i] + v;
    } else {
      Y[i] = __float2half_rn(EPILOGUE == kEpilogueGelu ? gelu_new(v) : v);
    }
  }
}

}  // namespace thaw_gpt2

using namespace thaw_gpt2;

// x[m,c] = float(wte[tokens[m],c]) + float(wpe[positions[m],c]). The host validates ids and positions.
extern "C" __global__ void gpt2_embed(const half* __restrict__ wte, const half* __restrict__ wpe,
                                      const int* __restrict__ tokens, const int* __restrict__ positions,
                                      float* __restrict__ x, int M, int C) {
  const size_t total = (size_t)M * C;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int m = (int)(i / C);
    const int c = (int)(i - (size_t)m * C);
    x[i] = __half2float(wte[(size_t)tokens[m] * C + c]) + __half2float(wpe[(size_t)positions[m] * C + c]);
  }
}

// Per row, two-pass: mean = sum(x)/C, var = sum((x-mean)^2)/C (biased), y = half((x-mean)*rsqrt(var+eps)*gamma+beta).
// One block (a multiple of 32 threads) per row, grid-stride over rows.
extern "C" __global__ void gpt2_layernorm(const float* __restrict__ x, const half* __restrict__ gamma,
                                          const half* __restrict__ beta, half* __restrict__ y, int M, int C,
                                          float eps) {
  __shared__ float red[32];
  for (int row = blockIdx.x; row < M; row += gridDim.x) {
    const float* xr = x + (size_t)row * C;
    half* yr = y + (size_t)row * C;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += xr[c];
    const float mean = block_sum(s, red) / (float)C;
    float q = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float d = xr[c] - mean;
      q += d * d;
    }
    const float var = block_sum(q, red) / (float)C;
    const float rstd = rsqrtf(var + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      yr[c] = __float2half_rn((xr[c] - mean) * rstd * __half2float(gamma[c]) + __half2float(beta[c]));
    }
  }
}

// Y[m,n] = half(act(sum_k X[m,k]*W[k,n] + bias[n])); act = identity (gelu == 0) or gelu_new (gelu == 1).
// Grid (N/16, ceil(M/16)), 256 threads. N and K multiples of 16; X and W 16-byte aligned.
extern "C" __global__ void __launch_bounds__(kMatmulThreads)
    gpt2_matmul(const half* __restrict__ X, const half* __restrict__ W, const half* __restrict__ bias,
                half* __restrict__ Y, int M, int N, int K, int gelu) {
  if (gelu) {
    matmul_conv1d<kEpilogueGelu>(X, W, bias, Y, nullptr, M, N, K);
  } else {
    matmul_conv1d<kEpilogueHalf>(X, W, bias, Y, nullptr, M, N, K);
  }
}

// R[m,n] = R[m,n] + (sum_k X[m,k]*W[k,n] + bias[n]): the fp32 residual stream. Same launch as gpt2_matmul.
extern "C" __global__ void __launch_bounds__(kMatmulThreads)
    gpt2_matmul_residual(const half* __restrict__ X, const half* __restrict__ W, const half* __restrict__ bias,
                         float* __restrict__ R, int M, int N, int K) {
  matmul_conv1d<kEpilogueResidual>(X, W, bias, nullptr, R, M, N, K);
}

// Writes row m's k and v (columns [C, 2C) and [2C, 3C) of qkv[M, 3C]) into kcache/vcache[cache_rows[m], h,
// positions[m], :], cache layout [B, H, maxT, D]. Grid-stride over M*C.
extern "C" __global__ void gpt2_kv_append(const half* __restrict__ qkv, half* __restrict__ kcache,
                                          half* __restrict__ vcache, const int* __restrict__ positions,
                                          const int* __restrict__ cache_rows, int M, int H, int D, int maxT) {
  const int C = H * D;
  const size_t total = (size_t)M * C;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int m = (int)(i / C);
    const int j = (int)(i - (size_t)m * C);
    const int h = j / D;
    const int d = j - h * D;
    const size_t dst = (((size_t)cache_rows[m] * H + h) * maxT + positions[m]) * D + d;
    const half* src = qkv + (size_t)m * 3 * C + C + j;
    kcache[dst] = src[0];
    vcache[dst] = src[C];
  }
}

// out[m, h*D+d] = half(sum_{t<=positions[m]} p_t * v_t[d]), p = softmax_t(scale * q.k_t) in fp32 with max
// subtraction; q from columns [h*D, (h+1)*D) of qkv row m; k_t, v_t from the caches at cache_rows[m], h, t.
// Grid (H, M), 128 threads. D a multiple of 8 and <= 128, positions[m] < maxT <= 1024; qkv and the caches
// 16-byte aligned.
extern "C" __global__ void __launch_bounds__(kAttnThreads)
    gpt2_attention(const half* __restrict__ qkv, const half* __restrict__ kcache, const half* __restrict__ vcache,
                   half* __restrict__ out, const int* __restrict__ positions, const int* __restrict__ cache_rows,
                   int M, int H, int D, int maxT, float scale) {
  __shared__ float q[kMaxD];
  __shared__ float p[kMaxT];
  __shared__ float part[kAttnThreads];
  __shared__ float red[32];
  const int h = blockIdx.x;
  const int m = blockIdx.y;
  const int tid = threadIdx.x;
  const int C = H * D;
  const int T = positions[m] + 1;
  const size_t head = ((size_t)cache_rows[m] * H + h) * maxT * D;
  const half* kh = kcache + head;
  const half* vh = vcache + head;

  const half* qh = qkv + (size_t)m * 3 * C + (size_t)h * D;
  for (int d = tid; d < D; d += blockDim.x) q[d] = __half2float(qh[d]);
  __syncthreads();

  // Scores: each thread a key at a time, the dot product in d order.
  float local_max = -INFINITY;
  for (int t = tid; t < T; t += blockDim.x) {
    const half* kr = kh + (size_t)t * D;
    float dot = 0.0f;
    for (int d = 0; d < D; d += 8) {
      uint4 u = *reinterpret_cast<const uint4*>(kr + d);
      const half2* k2 = reinterpret_cast<const half2*>(&u);
#pragma unroll
      for (int i = 0; i < 4; i++) {
        float2 f = __half22float2(k2[i]);
        dot += q[d + 2 * i] * f.x;
        dot += q[d + 2 * i + 1] * f.y;
      }
    }
    const float s = scale * dot;
    p[t] = s;
    local_max = fmaxf(local_max, s);
  }
  const float mx = block_max(local_max, red);
  float local_sum = 0.0f;
  for (int t = tid; t < T; t += blockDim.x) {
    const float e = expf(p[t] - mx);
    p[t] = e;
    local_sum += e;
  }
  const float sum = block_sum(local_sum, red);  // its barriers also publish p[]

  // P.V: G = blockDim/D groups of D threads; group g sums keys g, g+G, ...; then the groups in order.
  const int G = blockDim.x / D;
  float acc = 0.0f;
  if (tid < G * D) {
    const int d = tid % D;
    for (int t = tid / D; t < T; t += G) acc += p[t] * __half2float(vh[(size_t)t * D + d]);
  }
  part[tid] = acc;
  __syncthreads();
  if (tid < D) {
    float o = 0.0f;
    for (int g = 0; g < G; g++) o += part[g * D + tid];
    out[(size_t)m * C + (size_t)h * D + tid] = __float2half_rn(o / sum);
  }
}

// logits[m,v] = sum_c X[m,c] * wte[v,c] (tied embedding: an NT product). Grid (ceil(V/16), ceil(M/16)),
// 256 threads. C a multiple of 16; X and wte 16-byte aligned; vocabulary rows >= V are never read.
extern "C" __global__ void __launch_bounds__(kMatmulThreads)
    gpt2_lm_head(const half* __restrict__ X, const half* __restrict__ wte, float* __restrict__ logits, int M, int V,
                 int C) {
  float s = matmul_tile<true>(X, wte, M, V, C);
  const int m = blockIdx.y * kTile + (threadIdx.x >> 4);
  const int v = blockIdx.x * kTile + (threadIdx.x & 15);
  if (m < M && v < V) logits[(size_t)m * V + v] = s;
}

// out[m] = the index of the largest logit of row m, the lowest index on ties; NaN never wins; -1 when the
// whole row is NaN. One block (a multiple of 32 threads, <= 1024) per row, grid-stride over rows.
extern "C" __global__ void gpt2_argmax(const float* __restrict__ logits, int* __restrict__ out, int M, int V) {
  __shared__ float red_v[32];
  __shared__ int red_i[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int row = blockIdx.x; row < M; row += gridDim.x) {
    const float* lr = logits + (size_t)row * V;
    // (bv, bi) = the best candidate seen; bi == INT_MAX: none yet. (x, i) beats it when x > bv, or x == bv
    // and i < bi: a total order on non-NaN candidates, so the reduction order does not matter.
    float bv = -INFINITY;
    int bi = INT_MAX;
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
