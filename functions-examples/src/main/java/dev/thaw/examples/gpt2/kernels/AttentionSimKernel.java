package dev.thaw.examples.gpt2.kernels;

import dev.thaw.examples.transformer.SimLaunches;
import dev.thaw.runtime.gpu.sim.DeviceMemory;
import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;
import java.util.Arrays;

/**
 * {@code gpt2_attention(qkv, kcache, vcache, out, positions, cache_rows, M, H, D, maxT, scale)}: for row m
 * and head h, {@code s_t = scale * (q . k_t)} over t = 0..positions[m] (dot in d order, fp32),
 * {@code p_t = exp(s_t - max s)}, {@code out[m, h*D+d] = half((sum_t p_t v_t[d]) / sum_t p_t)}.
 *
 * <p>Same maths as the CUDA kernel; it sums p and p.v in another order and its {@code expf} is within 2
 * ulp, so outputs agree to one half ulp (~1e-3 relative). Touches what the CUDA kernel touches for its grid
 * (H, M) x 128 threads: the q columns of each qkv row, cache rows 0..positions[m] of each (b, h), out [M, C].
 */
public final class AttentionSimKernel implements SimKernel {

  @Override
  public String entry() {
    return Gpt2Kernels.ATTENTION;
  }

  @Override
  public void launch(SimLaunch launch) {
    long qkv = launch.pointer(0);
    long kcache = launch.pointer(1);
    long vcache = launch.pointer(2);
    long out = launch.pointer(3);
    long positions = launch.pointer(4);
    long cacheRows = launch.pointer(5);
    int M = launch.intArg(6);
    int H = launch.intArg(7);
    int D = launch.intArg(8);
    int maxT = launch.intArg(9);
    float scale = launch.floatArg(10);
    SimLaunches.expectShape(launch, H, M, Gpt2Kernels.ATTENTION_THREADS);
    if (D <= 0 || D > Gpt2Kernels.MAX_HEAD_SIZE || D % 8 != 0) {
      throw new IllegalArgumentException("gpt2_attention: D must be a multiple of 8 and at most "
          + Gpt2Kernels.MAX_HEAD_SIZE + ": " + D);
    }
    int C = H * D;
    DeviceMemory memory = launch.memory();
    int[] pos = SimIo.readInts(memory, positions, M);
    int[] rows = SimIo.readInts(memory, cacheRows, M);
    float[] q = new float[D];
    short[] qh = new short[D];
    float[] o = new float[D];
    int maxLen = 0;
    for (int m = 0; m < M; m++) {
      int T = pos[m] + 1;
      if (T < 1 || T > Math.min(maxT, Gpt2Kernels.MAX_CONTEXT)) {
        throw new IllegalArgumentException("gpt2_attention: positions[" + m + "] = " + pos[m]
            + " outside [0, " + Math.min(maxT, Gpt2Kernels.MAX_CONTEXT) + ")");
      }
      maxLen = Math.max(maxLen, T);
    }
    short[] cacheH = new short[maxLen * D];
    float[] k = new float[maxLen * D];
    float[] v = new float[maxLen * D];
    float[] p = new float[maxLen];
    for (int m = 0; m < M; m++) {
      int T = pos[m] + 1;
      for (int h = 0; h < H; h++) {
        SimIo.readHalves(memory, qkv + 2L * ((long) m * 3 * C + (long) h * D), qh, q, 0, D);
        long head = 2L * (((long) rows[m] * H + h) * maxT * D);
        SimIo.readHalves(memory, kcache + head, cacheH, k, 0, T * D);
        SimIo.readHalves(memory, vcache + head, cacheH, v, 0, T * D);
        float mx = Float.NEGATIVE_INFINITY;
        for (int t = 0; t < T; t++) {
          float dot = 0f;
          int base = t * D;
          for (int d = 0; d < D; d++) {
            dot += q[d] * k[base + d];
          }
          float s = scale * dot;
          p[t] = s;
          mx = Math.max(mx, s);
        }
        float sum = 0f;
        for (int t = 0; t < T; t++) {
          float e = (float) Math.exp(p[t] - mx);
          p[t] = e;
          sum += e;
        }
        Arrays.fill(o, 0f);
        for (int t = 0; t < T; t++) {
          float pt = p[t];
          int base = t * D;
          for (int d = 0; d < D; d++) {
            o[d] += pt * v[base + d];
          }
        }
        for (int d = 0; d < D; d++) {
          o[d] = o[d] / sum;
        }
        SimIo.writeHalves(memory, out + 2L * ((long) m * C + (long) h * D), o, 0, D, qh);
      }
    }
  }
}
