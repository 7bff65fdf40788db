package dev.thaw.examples.gpt2;

import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * Where a GPT-2 model's weights come from: a Hugging Face checkpoint ({@link HfCheckpoint}) or seeded random
 * values ({@link SeededWeights}). Either way every tensor of {@link Gpt2Tensor#all} is delivered as fp16,
 * in parts the reader asks for, so a model never has to be in host memory whole.
 */
public interface Gpt2Weights extends AutoCloseable {

  Gpt2Config config();

  /** Where the weights come from, for logs and the host state: a path, or the config name and seed. */
  String describe();

  /**
   * Fills {@code dst.remaining()} bytes of {@code tensor} in fp16 (little-endian binary16), starting
   * {@code offset} bytes into it, from {@code dst}'s position; advances the position by that much.
   * {@code offset} and the length are even. May be called from several threads at once.
   */
  void read(Gpt2Tensor tensor, long offset, ByteBuffer dst) throws IOException;

  @Override
  void close() throws IOException;
}
