package dev.thaw.examples.llama;

import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.GpuContext;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A tensor-parallel rank's buffers, allocated directly on its device outside any function session: its shard's
 * weights, KV cache and scratch, by the names a single-device {@link LlamaFunction} gives them. Not thread-safe:
 * filled by one thread before the passes run.
 */
final class RankMemory implements LlamaMemory, AutoCloseable {

  private final GpuContext context;
  private final Map<String, DeviceBuffer> buffers = new LinkedHashMap<>();
  private final AtomicBoolean closed = new AtomicBoolean();

  RankMemory(GpuContext context) {
    this.context = context;
  }

  GpuContext context() {
    return context;
  }

  @Override
  public BufferRef allocate(String name, long bytes) {
    checkOpen();
    if (buffers.containsKey(name)) {
      throw new IllegalArgumentException("buffer '" + name + "' is already allocated");
    }
    buffers.put(name, context.allocate(bytes));
    return new BufferRef(name);
  }

  @Override
  public long address(BufferRef ref) {
    return buffer(ref.name()).address();
  }

  @Override
  public void upload(BufferRef ref, ByteBuffer src) {
    DeviceBuffer b = buffer(ref.name());
    if (src.remaining() > b.size()) {
      throw new IllegalArgumentException(src.remaining() + " bytes do not fit in '" + ref.name() + "' of "
          + b.size());
    }
    context.copyHostToDevice(b.address(), src);
  }

  @Override
  public void download(BufferRef ref, long offset, ByteBuffer dst) {
    DeviceBuffer b = buffer(ref.name());
    if (offset < 0 || offset + dst.remaining() > b.size()) {
      throw new IllegalArgumentException(dst.remaining() + " bytes at " + offset + " are outside '" + ref.name()
          + "' of " + b.size());
    }
    context.copyDeviceToHost(dst, b.address() + offset);
  }

  @Override
  public long bytes() {
    return buffers.values().stream().mapToLong(DeviceBuffer::size).sum();
  }

  private DeviceBuffer buffer(String name) {
    checkOpen();
    DeviceBuffer b = buffers.get(name);
    if (b == null) {
      throw new IllegalArgumentException("no buffer '" + name + "' on device " + context.device().ordinal());
    }
    return b;
  }

  private void checkOpen() {
    if (closed.get()) {
      throw new IllegalStateException("the rank's memory is freed");
    }
  }

  /** Frees every buffer, newest first; the rank's stream must be idle. Idempotent. */
  @Override
  public void close() {
    if (closed.compareAndSet(false, true)) {
      List<DeviceBuffer> all = new ArrayList<>(buffers.values());
      for (int i = all.size() - 1; i >= 0; i--) {
        all.get(i).close();
      }
      buffers.clear();
    }
  }
}
