// Device-check kernels bundled with the Thaw runtime (`thaw check`, LaunchBenchmark).
//
// Every kernel is grid-stride: any grid covers all n elements, so the Java reference kernels of the sim
// device (dev.thaw.runtime.check.CheckSimKernels) compute exactly the same elements whatever the launch
// dimensions. Keep the two in step; regenerate the PTX with build-ptx.sh after an edit.

extern "C" __global__ void thaw_empty() {}

// y = a * x + y. nvcc contracts a * x + y into one fma.rn.f32; the reference uses Math.fma to match bit
// for bit.
extern "C" __global__ void thaw_saxpy(float a, const float* __restrict__ x, float* __restrict__ y, int n) {
  int stride = gridDim.x * blockDim.x;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    y[i] = a * x[i] + y[i];
  }
}

extern "C" __global__ void thaw_fill_u32(unsigned* p, unsigned v, int n) {
  int stride = gridDim.x * blockDim.x;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] = v;
  }
}
