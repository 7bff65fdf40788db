// Native baseline for Thaw's launch benchmark: the same empty-kernel launch loop in C against the CUDA
// Driver API, so the JNA path's overhead is measured against the driver itself in the same run.
// Build and run on a GPU host:
//   gcc -O2 -o launch_baseline launch_baseline.c -I/usr/local/cuda/include -lcuda && ./launch_baseline
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(call)                                                        \
  do {                                                                     \
    CUresult r_ = (call);                                                  \
    if (r_ != CUDA_SUCCESS) {                                              \
      const char* name_ = "?";                                             \
      cuGetErrorName(r_, &name_);                                          \
      fprintf(stderr, "%s failed: %s (%d)\n", #call, name_, (int)r_);      \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

static const char* PTX =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry thaw_empty()\n{\n\tret;\n}\n";

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(void) {
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction f;
  CUstream s;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuModuleLoadData(&mod, PTX));
  CHECK(cuModuleGetFunction(&f, mod, "thaw_empty"));
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  const int batch = 1024;
  for (int i = 0; i < 20 * batch; i++) {  // warm-up
    CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
  }
  CHECK(cuStreamSynchronize(s));
  for (int round = 0; round < 5; round++) {
    const int n = 200 * batch;
    double t0 = now_us();
    for (int i = 0; i < n; i++) {
      CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
      if ((i + 1) % batch == 0) CHECK(cuStreamSynchronize(s));
    }
    double t1 = now_us();
    printf("native launch throughput: %.3f us/launch (%.0f launches/s), batches of %d with a sync each\n",
           (t1 - t0) / n, n / ((t1 - t0) / 1e6), batch);
  }
  double t0 = now_us();
  const int m = 20000;
  for (int i = 0; i < m; i++) {
    CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
    CHECK(cuStreamSynchronize(s));
  }
  printf("native launch+sync latency: %.3f us\n", (now_us() - t0) / m);
  return 0;
}
