// Kernels of the mlp example function (dev.thaw.examples.mlp.MlpFunction).
//
// mlp_linear computes one dense layer, y[m,n] = act(sum_k x[m,k] * w[k,n] + b[n]), in fp32 storage with the
// product on tensor cores: WMMA m16n16k8, precision::tf32 operands, fp32 accumulate (sm_80 and newer).
//
// TF32 rounding. load_matrix_sync for precision::tf32 is a raw 32-bit load (mma.hpp: __mma_tf32_m16n16k8_ld_a
// and _ld_b); it rounds nothing, and CUDA does not define what the MMA makes of the 13 low mantissa bits of an
// operand that is not already TF32. So every operand is rounded explicitly with wmma::__float_to_tf32 when it
// is staged into shared memory. That is cvt.rna.tf32.f32: round to nearest, ties AWAY from zero (not to
// even), which on sm_80/sm_90 is the integer sequence (bits + 0x1000) & 0xffffe000. The Java twin
// (dev.thaw.examples.mlp.MlpSimKernels) rounds the same way. Products of two TF32 values are exact in fp32;
// only the order of the fp32 sums differs between the tensor core and the twin.
//
// Shape contract, which the twin mirrors byte for byte:
//  - blockDim must be (128, 1, 1). A smaller block touches nothing; a larger one is refused at launch
//    (CUDA_ERROR_INVALID_VALUE, from __launch_bounds__), and the twin, which cannot refuse, touches nothing.
//  - Any grid covers every output: blocks stride over the 64x64 output tiles by blockIdx.x (blocks with
//    blockIdx.y/z > 0 repeat the same work and store the same values).
//  - M <= 0, N <= 0 or K < 0 touch nothing. Otherwise x[0, M*K), w[0, K*N) and b[0, N) are read and
//    y[0, M*N) is written, nothing else: M, N and K need not be multiples of 16 or 8, because tiles are
//    staged through shared memory with zero padding and stores are guarded. K == 0 gives y = act(b).
//  - relu != 0 maps every value that is not > 0 (negative, zero, NaN) to +0.0f.
//
// Regenerate the checked-in PTX with build-mlp-ptx.sh after an edit; MlpPtxTest checks that it is current.

#include <mma.h>

using namespace nvcuda;

namespace {

constexpr int BM = 64;        // rows of an output tile
constexpr int BN = 64;        // columns of an output tile
constexpr int BK = 32;        // depth of one shared-memory stage: four k8 MMA steps
constexpr int THREADS = 128;  // four warps in a 2x2 grid, each owning a 32x32 quarter = 2x2 fragments
// Row strides of the shared tiles, padded by 4 floats against bank conflicts. WMMA wants ldm a multiple of
// 4 floats and fragment pointers 32-byte aligned: rows 16*i of A (16*36*4 = 2304 bytes) plus k 8*j (32 bytes),
// rows 8*j of B (8*68*4 = 2176) plus n 16*i (64), rows 16*i of C plus n 16*j: all multiples of 32.
constexpr int LDA = BK + 4;
constexpr int LDB = BN + 4;
constexpr int LDC = BN + 4;

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS)
mlp_linear(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
           float* __restrict__ y, int M, int N, int K, int relu) {
  if (blockDim.x != THREADS || blockDim.y != 1 || blockDim.z != 1 || M <= 0 || N <= 0 || K < 0) {
    return;
  }
  __shared__ __align__(128) float as[BM * LDA];
  __shared__ __align__(128) float bs[BK * LDB];
  __shared__ __align__(128) float cs[BM * LDC];

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int wm = (warp / 2) * 32;
  const int wn = (warp % 2) * 32;
  const long long tilesM = ((long long)M + BM - 1) / BM;
  const long long tilesN = ((long long)N + BN - 1) / BN;
  const long long tiles = tilesM * tilesN;

  for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int m0 = (int)(t / tilesN) * BM;
    const int n0 = (int)(t % tilesN) * BN;

    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
#pragma unroll
      for (int j = 0; j < 2; j++) {
        wmma::fill_fragment(acc[i][j], 0.0f);
      }
    }

    for (int k0 = 0; k0 < K; k0 += BK) {
      // Stage x[m0:m0+64, k0:k0+32] and w[k0:k0+32, n0:n0+64], rounded to TF32, zero outside the matrices.
      // Consecutive threads read consecutive columns: coalesced for any M, N, K.
      for (int i = tid; i < BM * BK; i += THREADS) {
        const int r = i / BK;
        const int c = i % BK;
        const int m = m0 + r;
        const int k = k0 + c;
        const float v = (m < M && k < K) ? x[(size_t)m * K + k] : 0.0f;
        as[r * LDA + c] = wmma::__float_to_tf32(v);
      }
      for (int i = tid; i < BK * BN; i += THREADS) {
        const int r = i / BN;
        const int c = i % BN;
        const int k = k0 + r;
        const int n = n0 + c;
        const float v = (k < K && n < N) ? w[(size_t)k * N + n] : 0.0f;
        bs[r * LDB + c] = wmma::__float_to_tf32(v);
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < BK; kk += 8) {
        wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a[2];
        wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> bf[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
          wmma::load_matrix_sync(a[i], as + (wm + 16 * i) * LDA + kk, LDA);
          wmma::load_matrix_sync(bf[i], bs + kk * LDB + wn + 16 * i, LDB);
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
#pragma unroll
          for (int j = 0; j < 2; j++) {
            wmma::mma_sync(acc[i][j], a[i], bf[j], acc[i][j]);
          }
        }
      }
      __syncthreads();  // the next stage overwrites as and bs
    }

#pragma unroll
    for (int i = 0; i < 2; i++) {
#pragma unroll
      for (int j = 0; j < 2; j++) {
        wmma::store_matrix_sync(cs + (wm + 16 * i) * LDC + wn + 16 * j, acc[i][j], LDC, wmma::mem_row_major);
      }
    }
    __syncthreads();
    for (int i = tid; i < BM * BN; i += THREADS) {
      const int r = i / BN;
      const int c = i % BN;
      const int m = m0 + r;
      const int n = n0 + c;
      if (m < M && n < N) {
        const float v = cs[r * LDC + c] + b[n];
        y[(size_t)m * N + n] = (relu != 0 && !(v > 0.0f)) ? 0.0f : v;
      }
    }
    __syncthreads();  // the next tile overwrites cs
  }
}
