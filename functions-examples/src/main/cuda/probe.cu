// Kernels of the memory probe function (dev.thaw.examples.probe.MemoryProbeFunction), which exists to prove
// fault isolation: a request may make this kernel read any device address, so one function can fault the GPU
// with CUDA_ERROR_ILLEGAL_ADDRESS while another function serves beside it.
//
// probe_read copies count floats from buf[offset, offset + count) to out[0, count). There is NO bounds check on
// offset, on purpose: an offset outside the buffer reads whatever the address is, and an address that is not
// mapped is an illegal address, a sticky error that poisons the process's context. Index arithmetic is 64-bit,
// so any offset reaches the address buf + 4 * offset (modulo 2^64).
//
// Shape contract, which the Java twin (dev.thaw.examples.probe.ProbeSimKernels) mirrors byte for byte: thread
// t = blockIdx.x * blockDim.x + threadIdx.x with t < count reads buf[offset + t] and writes out[t]; nothing else
// is touched. count <= 0 touches nothing; blockIdx.y/z and threadIdx.y/z are ignored (such threads repeat the
// work of their x-coordinates, storing the same values).
//
// probe_write stores value to buf[offset, offset + count), again unchecked: it exists to prove that a write to a
// buffer the image's profile called read-only (its weights) faults once the restore has made that memory read-only,
// as a store to a read-only mapping is an illegal address. Same thread shape: thread t < count stores buf[offset + t].
//
// Regenerate the checked-in PTX with build-probe-ptx.sh after an edit; ProbePtxTest checks that it is current.

extern "C" __global__ void probe_read(const float* buf, long long offset, int count, float* out) {
  long long t = (long long) blockIdx.x * blockDim.x + threadIdx.x;
  if (t < count) {
    out[t] = buf[offset + t];
  }
}

extern "C" __global__ void probe_write(float* buf, long long offset, int count, float value) {
  long long t = (long long) blockIdx.x * blockDim.x + threadIdx.x;
  if (t < count) {
    buf[offset + t] = value;
  }
}
