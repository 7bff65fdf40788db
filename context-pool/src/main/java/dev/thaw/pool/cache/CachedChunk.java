package dev.thaw.pool.cache;

import dev.thaw.image.store.Digest;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PinnedBuffer;

/**
 * Where a verified chunk lies in registered host memory: {@code length} bytes at {@code offset} of {@code buffer},
 * ready to be the source of {@link GpuStream#copyHostToDeviceAsync}. The bytes were checked
 * against {@code digest} when they entered the cache and are trusted from then on.
 */
public record CachedChunk(Digest digest, PinnedBuffer buffer, long offset, int length) {

  /** The host address of the chunk's first byte in this process. */
  public long hostAddress() {
    return buffer.address() + offset;
  }
}
