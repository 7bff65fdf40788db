package dev.thaw.examples.llama;

import dev.thaw.examples.llama.kernels.HalfType;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.SplittableRandom;
import java.util.stream.LongStream;

/**
 * Random weights of a named shape: normal(0, 0.02) for matrices, embeddings and biases, ones for the RMSNorm
 * weights, rounded to the config's type.
 *
 * <p>Values are a function of (seed, tensor, element) only, as in GPT-2's {@code SeededWeights}: each tensor is
 * cut into chunks of {@link #CHUNK} elements, each with its own generator seeded from the three, so any part can
 * be produced alone, in any order, on any number of threads. Nothing is kept.
 */
public final class SeededLlamaWeights implements LlamaWeights {

  public static final float STD = 0.02f;
  /** Elements per generator. Part of the definition of the values: changing it changes every model. */
  public static final int CHUNK = 1 << 16;

  private final LlamaConfig config;
  private final long seed;

  public SeededLlamaWeights(LlamaConfig config, long seed) {
    this.config = config.validate();
    this.seed = seed;
  }

  @Override
  public LlamaConfig config() {
    return config;
  }

  @Override
  public String describe() {
    return "seeded:" + config.name() + ":" + config.type().torchName() + ":" + seed;
  }

  @Override
  public void read(LlamaTensor tensor, long offset, ByteBuffer dst) {
    int n = dst.remaining();
    if (offset < 0 || (offset & 1) != 0 || (n & 1) != 0 || offset + n > tensor.bytes()) {
      throw new IllegalArgumentException(n + " bytes at " + offset + " are not whole elements inside " + tensor);
    }
    ByteBuffer out = dst.slice().order(ByteOrder.LITTLE_ENDIAN);
    HalfType type = config.type();
    long first = offset / 2;
    long end = first + n / 2;
    if (tensor.init() == LlamaTensor.Init.ONES) {
      short one = type.fromFloat(1f);
      for (int i = 0; i < n / 2; i++) {
        out.putShort(2 * i, one);
      }
    } else {
      LongStream chunks = LongStream.rangeClosed(first / CHUNK, (end - 1) / CHUNK);
      if (end - first > 4L * CHUNK) {
        chunks = chunks.parallel();
      }
      chunks.forEach(chunk -> fillChunk(tensor, type, chunk, first, end, out));
    }
    dst.position(dst.position() + n);
  }

  private void fillChunk(LlamaTensor tensor, HalfType type, long chunk, long first, long end, ByteBuffer out) {
    SplittableRandom random = new SplittableRandom(seed * 0x9E3779B97F4A7C15L
        + tensor.index() * 0xC2B2AE3D27D4EB4FL + chunk * 0x165667B19E3779F9L);
    long start = chunk * CHUNK;
    long stop = Math.min(start + CHUNK, tensor.elements());
    for (long e = start; e < stop && e < end; e++) {
      // Every element from the chunk's start draws, written or not, so a value does not depend on the part asked.
      short h = type.fromFloat(STD * (float) random.nextGaussian());
      if (e >= first) {
        out.putShort((int) (2 * (e - first)), h);
      }
    }
  }

  @Override
  public void close() {}
}
