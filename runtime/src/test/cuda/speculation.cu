// Kernels of the speculation tests (dev.thaw.runtime.speculation). Each has a Java twin for the simulated
// device in SpeculationSimKernels.java that touches exactly the bytes this kernel touches.
// Regenerate the PTX with ./build-speculation-ptx.sh (needs nvcc). No anonymous namespaces: nvcc would
// mangle them with a hash of the path.

// (a) Touches only its arguments: reads x, writes y.
extern "C" __global__ void spec_args_only(const float* x, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    y[i] = 2.0f * x[i];
  }
}

// (b) Reads through a table of pointers held in device memory: out[i] = tables[i % k][i].
extern "C" __global__ void spec_pointer_table(const float* const* tables, int k, float* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    out[i] = tables[i % k][i];
  }
}

// (c) Writes n + extra elements: past the end of p when extra > 0.
extern "C" __global__ void spec_write_past(float* p, int n, int extra) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n + extra; i += blockDim.x * gridDim.x) {
    p[i] = 1.0f;
  }
}

// (d) A predicated store: dst[i] = src[i] only where src[i] > threshold. The store is written as inline PTX
// so that it stays one predicated st.global whatever nvcc's branch heuristics do.
extern "C" __global__ void spec_predicated(const int* src, int* dst, int threshold, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    int v = src[i];
    asm volatile("{\n\t.reg .pred q;\n\tsetp.gt.s32 q, %0, %1;\n\t@q st.global.u32 [%2], %0;\n\t}"
                 :: "r"(v), "r"(threshold), "l"(dst + i) : "memory");
  }
}

// (d) Generic-address stores: the pointer may point to shared or global memory, so nvcc keeps it generic
// (no cvta.to.global) and stores with a plain st. Writes out[i] = i when to_shared == 0.
extern "C" __global__ void spec_generic_ptr(unsigned* out, int to_shared, int n) {
  __shared__ unsigned scratch[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned* p = to_shared ? &scratch[threadIdx.x % 256] : &out[i];
    *p = (unsigned)i;
  }
}

// (d)+(e) A store in a device function, through the pointer the kernel passes: flag[0] = sum of in[0..n).
__device__ __noinline__ void spec_generic_store(volatile unsigned* p, unsigned v) { *p = v; }

extern "C" __global__ void spec_generic(unsigned* flag, const unsigned* in, int n) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    unsigned s = 0;
    for (int i = 0; i < n; i++) {
      s += in[i];
    }
    spec_generic_store(flag, s);
  }
}

// (e) The accesses happen in device functions that are not inlined: the analysis must follow the calls.
__device__ __noinline__ float spec_load(const float* p, int i) { return p[i]; }

__device__ __noinline__ void spec_store(float* p, int i, float v) { p[i] = v; }

__device__ __noinline__ float* spec_pick(float* a, float* b, int which) { return which ? a : b; }

extern "C" __global__ void spec_calls(const float* in, float* out, float* other, int which, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    float* dst = spec_pick(out, other, which);
    spec_store(dst, i, spec_load(in, i) + 1.0f);
  }
}

// (f) A struct passed by value that holds pointers.
struct SpecPair {
  const float* in;
  int n;
  float scale;
  float* out;
  double* sum;
};

extern "C" __global__ void spec_struct(SpecPair p) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += blockDim.x * gridDim.x) {
    float v = p.scale * p.in[i];
    p.out[i] = v;
    atomicAdd(p.sum, (double)v);
  }
}

// A pointer stored to memory: the analysis cannot follow it and makes the parameter read-write.
extern "C" __global__ void spec_escape(float* p, float** slot) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *slot = p;
  }
}

// A call through a function pointer: the analysis cannot see the callee and makes the arguments read-write.
typedef void (*spec_op)(float*, int);

__device__ __noinline__ void spec_op_one(float* p, int i) { p[i] = 1.0f; }

__device__ __noinline__ void spec_op_two(float* p, int i) { p[i] = 2.0f; }

extern "C" __global__ void spec_indirect(float* p, const float* unused, int which, int n) {
  spec_op op = which ? spec_op_one : spec_op_two;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    op(p, i);
  }
}
