package dev.thaw.runtime.gpu;

import java.nio.ByteBuffer;

/**
 * Page-locked host memory ({@code cuMemHostAlloc}): the source and target of asynchronous copies.
 *
 * <p>Views are direct, little-endian {@link ByteBuffer}s over the same memory; they must not be used after
 * {@link #close()}.
 */
public interface PinnedBuffer extends AutoCloseable {

  /** The host address of the first byte. */
  long address();

  long size();

  /**
   * True for host memory {@linkplain GpuContext#registerHost registered} read-only: the device reads it and a
   * copy into it is refused.
   */
  default boolean isReadOnly() {
    return false;
  }

  /**
   * A view of the whole buffer, position 0 and limit {@link #size()}.
   *
   * @throws IllegalStateException if the buffer is larger than a {@code ByteBuffer} can be; use {@link #slice}
   */
  ByteBuffer asByteBuffer();

  /** A view of {@code [offset, offset + length)}. */
  ByteBuffer slice(long offset, int length);

  /** Frees the memory. Idempotent. */
  @Override
  void close();
}
