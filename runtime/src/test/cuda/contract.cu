// Kernels of the GpuDriver contract suite. Each has a Java twin for the simulated device in
// ContractSimKernels.java; the two must compute the same thing.
// Regenerate the PTX with ./build-ptx.sh (needs nvcc).

struct StructParams {
  float* out;
  int n;
  float scale;
  double bias;
};

extern "C" __global__ void thaw_test_empty() {}

extern "C" __global__ void thaw_test_saxpy(float a, const float* x, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    y[i] = a * x[i] + y[i];
  }
}

// out[i] = scale * i + bias, for a struct passed by value.
extern "C" __global__ void thaw_test_struct(StructParams p) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += blockDim.x * gridDim.x) {
    p.out[i] = p.scale * (float)i + (float)p.bias;
  }
}

// Every scalar width, written back as doubles so the host can check the marshalling.
extern "C" __global__ void thaw_test_scalars(signed char a, short b, int c, long long d, float e, double f,
                                             double* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    out[0] = (double)a;
    out[1] = (double)b;
    out[2] = (double)c;
    out[3] = (double)d;
    out[4] = (double)e;
    out[5] = f;
  }
}

// One store to an arbitrary address: the illegal-address and read-only cases.
extern "C" __global__ void thaw_test_store(unsigned long long address, unsigned value) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *(volatile unsigned*)address = value;
  }
}
