// Which cuMemAddressReserve hints does the driver honour? Prints, for each hint, the address it returned.
// Usage: va_probe [occupy]   (occupy: first mmap 40 GiB of host address space near the bottom, as a JVM heap does)
#include <cuda.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "occupy") == 0) {
    void* p = mmap((void*)0x600000000ULL, 40ULL << 30, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    printf("host mmap at %p\n", p);
  }
  CUdevice dev; CUcontext ctx;
  cuInit(0); cuDeviceGet(&dev, 0); cuCtxCreate_v4(&ctx, NULL, 0, dev);
  unsigned long long hints[] = {0, 0, 0x840000000ULL, 0x1000000000ULL, 0x10000000000ULL, 0x100000000000ULL,
      0x200000000000ULL, 0x300000000000ULL, 0x500000000000ULL, 0x7e0000000000ULL, 0x7f0000000000ULL};
  for (unsigned i = 0; i < sizeof hints / sizeof hints[0]; i++) {
    CUdeviceptr got = 0;
    CUresult r = cuMemAddressReserve(&got, 2ULL << 20, 0, hints[i], 0);
    printf("hint 0x%llx -> 0x%llx (%d)%s\n", hints[i], (unsigned long long)got, r, got == hints[i] ? "  HONOURED" : "");
  }
  CUdeviceptr big = 0;
  CUresult r = cuMemAddressReserve(&big, 1ULL << 40, 0, 0, 0);
  printf("1 TiB, no hint -> 0x%llx (%d)\n", (unsigned long long)big, r);
  CUdeviceptr big2 = 0;
  r = cuMemAddressReserve(&big2, 1ULL << 40, 0, 0x200000000000ULL, 0);
  printf("1 TiB, hint 0x200000000000 -> 0x%llx (%d)\n", (unsigned long long)big2, r);
  FILE* f = fopen("/proc/self/maps", "r");
  char line[512];
  unsigned long long lo, hi;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && hi - lo >= (1ULL << 30)) printf("map >=1GiB: %s", line);
  }
  return 0;
}
