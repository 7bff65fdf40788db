package dev.thaw.examples.gpt2.kernels;

import dev.thaw.runtime.gpu.sim.DeviceMemory;
import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;

/**
 * {@code gpt2_kv_append(qkv, kcache, vcache, positions, cache_rows, M, H, D, maxT)}: copies row m's k and v
 * (columns [C, 2C) and [2C, 3C) of qkv [M, 3C]) to {@code cache[cache_rows[m], h, positions[m], :]}, caches
 * [B, H, maxT, D]. Exact (a copy). Reads only the k and v columns of qkv, as the CUDA kernel does.
 */
public final class KvAppendSimKernel implements SimKernel {

  @Override
  public String entry() {
    return Gpt2Kernels.KV_APPEND;
  }

  @Override
  public void launch(SimLaunch launch) {
    long qkv = launch.pointer(0);
    long kcache = launch.pointer(1);
    long vcache = launch.pointer(2);
    long positions = launch.pointer(3);
    long cacheRows = launch.pointer(4);
    int M = launch.intArg(5);
    int H = launch.intArg(6);
    int D = launch.intArg(7);
    int maxT = launch.intArg(8);
    if (M <= 0 || H <= 0 || D <= 0) {
      return;
    }
    int C = H * D;
    DeviceMemory memory = launch.memory();
    int[] pos = SimIo.readInts(memory, positions, M);
    int[] rows = SimIo.readInts(memory, cacheRows, M);
    short[] kv = new short[2 * C];
    for (int m = 0; m < M; m++) {
      memory.getShorts(qkv + 2L * ((long) m * 3 * C + C), kv, 0, 2 * C);
      for (int h = 0; h < H; h++) {
        long dst = 2L * ((((long) rows[m] * H + h) * maxT + pos[m]) * D);
        memory.putShorts(kcache + dst, kv, h * D, D);
        memory.putShorts(vcache + dst, kv, C + h * D, D);
      }
    }
  }
}
