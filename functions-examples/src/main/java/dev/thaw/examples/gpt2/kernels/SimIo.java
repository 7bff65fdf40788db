package dev.thaw.examples.gpt2.kernels;

import dev.thaw.runtime.gpu.sim.DeviceMemory;

/**
 * What the GPT-2 sim kernels share: bulk half/float moves between device memory and plain arrays, and the
 * scalar maths written exactly as in {@code gpt2.cu}.
 */
final class SimIo {

  private SimIo() {}

  /** Reads {@code len} halves at {@code address} into {@code dst[off..)} as floats; {@code scratch} holds at least len. */
  static void readHalves(DeviceMemory memory, long address, short[] scratch, float[] dst, int off, int len) {
    memory.getShorts(address, scratch, 0, len);
    Fp16.toFloats(scratch, 0, dst, off, len);
  }

  static float[] readHalves(DeviceMemory memory, long address, int len) {
    float[] out = new float[len];
    readHalves(memory, address, new short[len], out, 0, len);
    return out;
  }

  /** Rounds {@code src[off..off+len)} to halves (nearest even) and writes them at {@code address}. */
  static void writeHalves(DeviceMemory memory, long address, float[] src, int off, int len, short[] scratch) {
    Fp16.fromFloats(src, off, scratch, 0, len);
    memory.putShorts(address, scratch, 0, len);
  }

  static int[] readInts(DeviceMemory memory, long address, int len) {
    int[] out = new int[len];
    memory.getInts(address, out, 0, len);
    return out;
  }

  /** GELU, tanh approximation ("gelu_new"), as gpt2.cu computes it: fp32 except tanh, taken in double. */
  static float geluNew(float x) {
    final float sqrt2OverPi = 0.7978845608028654f;
    float inner = sqrt2OverPi * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + (float) Math.tanh(inner));
  }
}
