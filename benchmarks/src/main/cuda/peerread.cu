// The read kernel of the multi-link harness (dev.thaw.bench.restore.MultiLinkHarness): how fast a kernel reads
// weights in this device's memory against weights of another device mapped here (the node-wide HBM tier's peer
// mapping), as a decode step reads its weights.
//
// thaw_read_xor reads n 16-byte words from p, every thread a grid-stride share, and folds them into *out with
// atomicXor, so the loads cannot be dropped. Regenerate the checked-in PTX after an edit:
//   nvcc -ptx -arch=compute_80 -o ../resources/dev/thaw/bench/restore/peerread.ptx peerread.cu

extern "C" __global__ void thaw_read_xor(const uint4* __restrict__ p, long long n, unsigned int* out) {
  unsigned int acc = 0;
  long long stride = (long long) gridDim.x * blockDim.x;
  for (long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  atomicXor(out, acc);
}
