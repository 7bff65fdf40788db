package dev.thaw.examples.llama;

import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * Where a Llama-family model's weights come from: a Hugging Face checkpoint ({@link LlamaCheckpoint}) or seeded
 * random values ({@link SeededLlamaWeights}). Either way every tensor of {@link LlamaTensor#all} is delivered in
 * the config's 16-bit type, in parts the reader asks for, so a model never has to be in host memory whole.
 */
public interface LlamaWeights extends AutoCloseable {

  LlamaConfig config();

  /** Where the weights come from, for logs and the host state: a path, or the shape name and seed. */
  String describe();

  /**
   * Fills {@code dst.remaining()} bytes of {@code tensor} (little-endian, the config's type), starting
   * {@code offset} bytes into it, from {@code dst}'s position; advances the position by that much.
   * {@code offset} and the length are even.
   */
  void read(LlamaTensor tensor, long offset, ByteBuffer dst) throws IOException;

  @Override
  void close() throws IOException;
}
