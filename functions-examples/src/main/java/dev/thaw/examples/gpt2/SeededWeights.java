package dev.thaw.examples.gpt2;

import dev.thaw.examples.gpt2.kernels.Fp16;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.SplittableRandom;
import java.util.stream.LongStream;

/**
 * Random GPT-2 weights as GPT-2 initializes them: normal(0, 0.02) for the matrices and embeddings, zeros for
 * biases and betas, ones for gammas, rounded to fp16.
 *
 * <p>Values are a function of (seed, tensor, element) only: each tensor is cut into chunks of
 * {@link #CHUNK} elements, each with its own generator seeded from the three, so any part of any tensor can be
 * produced alone, in any order, on any number of threads, and the same seed always gives the same model.
 * Nothing is kept: host memory stays at what the reader passes in.
 */
public final class SeededWeights implements Gpt2Weights {

  public static final float STD = 0.02f;
  /** Elements per generator. Part of the definition of the values: changing it changes every model. */
  public static final int CHUNK = 1 << 16;

  private static final short ONE = Fp16.fromFloat(1f);

  private final Gpt2Config config;
  private final long seed;

  public SeededWeights(Gpt2Config config, long seed) {
    this.config = config.validate();
    this.seed = seed;
  }

  @Override
  public Gpt2Config config() {
    return config;
  }

  public long seed() {
    return seed;
  }

  @Override
  public String describe() {
    return "seeded:" + config.name() + ":" + seed;
  }

  @Override
  public void read(Gpt2Tensor tensor, long offset, ByteBuffer dst) {
    int n = dst.remaining();
    if (offset < 0 || (offset & 1) != 0 || (n & 1) != 0 || offset + n > tensor.halfBytes()) {
      throw new IllegalArgumentException(n + " bytes at " + offset + " are not whole halves inside " + tensor);
    }
    ByteBuffer out = dst.slice().order(ByteOrder.LITTLE_ENDIAN);
    long first = offset / 2;
    long end = first + n / 2;
    switch (tensor.init()) {
      case ZEROS -> {
        for (int i = 0; i < n / 2; i++) {
          out.putShort(2 * i, (short) 0);
        }
      }
      case ONES -> {
        for (int i = 0; i < n / 2; i++) {
          out.putShort(2 * i, ONE);
        }
      }
      case NORMAL -> {
        LongStream chunks = LongStream.rangeClosed(first / CHUNK, (end - 1) / CHUNK);
        if (end - first > 4L * CHUNK) {
          chunks = chunks.parallel();
        }
        chunks.forEach(chunk -> fillChunk(tensor, chunk, first, end, out));
      }
      default -> throw new IllegalStateException(tensor.init().toString());
    }
    dst.position(dst.position() + n);
  }

  /** Writes the part of {@code chunk} inside [first, end) into {@code out} (whose index 0 is element first). */
  private void fillChunk(Gpt2Tensor tensor, long chunk, long first, long end, ByteBuffer out) {
    SplittableRandom random = new SplittableRandom(seed * 0x9E3779B97F4A7C15L
        + tensor.index() * 0xC2B2AE3D27D4EB4FL + chunk * 0x165667B19E3779F9L);
    long start = chunk * CHUNK;
    long stop = Math.min(start + CHUNK, tensor.elements());
    for (long e = start; e < stop && e < end; e++) {
      // Every element from the chunk's start draws, written or not, so a value does not depend on which part
      // was asked for.
      short h = Fp16.fromFloat(STD * (float) random.nextGaussian());
      if (e >= first && e < end) {
        out.putShort((int) (2 * (e - first)), h);
      }
    }
  }

  @Override
  public void close() {}
}
