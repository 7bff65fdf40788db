// Kernel of the wait function (dev.thaw.examples.wait.WaitFunction), which exists to measure what surrounds a
// function whose invoke lasts a set time (the server's own cost as the invoke grows): it does nothing but wait.
//
// wait_ns spins until the device's global timer (%globaltimer, nanoseconds) has advanced by at least nanos since
// the thread started, then thread 0 of block 0 writes the nanoseconds it waited to out[0]. Launch it as one thread
// (grid 1, block 1): every other thread only waits as well.
//
// Shape contract, which the Java twin (dev.thaw.examples.wait.WaitSimKernels) mirrors: thread 0 of block 0 writes
// the 8 bytes at out[0]; nothing else is touched.
//
// Regenerate the checked-in PTX with build-wait-ptx.sh after an edit; WaitPtxTest checks that it is current.

__device__ __forceinline__ unsigned long long global_timer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

extern "C" __global__ void wait_ns(unsigned long long nanos, unsigned long long* out) {
  unsigned long long start = global_timer();
  unsigned long long waited;
  do {
    waited = global_timer() - start;
  } while (waited < nanos);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    out[0] = waited;
  }
}
