package dev.thaw.image.build;

import java.nio.ByteBuffer;

/**
 * Cuts bytes into chunks. The builder hands it each staged segment of an allocation (at most
 * {@link BuildOptions#stagingBytes()} bytes, starting at a multiple of it); chunks never span two segments.
 *
 * <p>Implementations must be deterministic — the same bytes cut the same way, whatever else ran before — since
 * that is what makes equal contents in two images the same chunks. Thread-safe: segments are cut concurrently.
 */
public interface Chunker {

  /**
   * The lengths of the chunks {@code data}'s remaining bytes are cut into, in order; they sum to
   * {@code data.remaining()}. The buffer's position and limit are left unchanged.
   */
  int[] cut(ByteBuffer data);

  /** The longest chunk it makes: what a restore's staging must hold. */
  int maxChunkBytes();

  /** One line for logs and build reports, e.g. {@code fixed 4 MiB}. */
  String describe();
}
