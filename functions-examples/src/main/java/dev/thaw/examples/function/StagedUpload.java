package dev.thaw.examples.function;

import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PinnedBuffer;
import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * Streams host data to device memory through two pinned halves on the session's stream: while one half is
 * copied, the next part is read into the other. For weights far larger than host memory should hold at once.
 * {@link #close()} waits for the last copy before it frees the staging, so a copy never reads freed memory.
 */
public final class StagedUpload implements AutoCloseable {

  /** Fills {@code dst} (from its position to its limit) with the bytes of the source at {@code offset}. */
  @FunctionalInterface
  public interface Source {
    void read(long offset, ByteBuffer dst) throws IOException;
  }

  private final GpuStream stream;
  private final int half;
  private final PinnedBuffer pinned;
  private final GpuEvent[] free = new GpuEvent[2];
  private final boolean[] inFlight = new boolean[2];
  private int slot;
  private boolean closed;

  /** Staging of two halves of {@code halfBytes} each. */
  public StagedUpload(FunctionSession session, int halfBytes) {
    this(session.context(), session.stream(), halfBytes);
  }

  /** Staging of two halves of {@code halfBytes} each in {@code ctx}, copying on {@code stream} (of that context). */
  public StagedUpload(GpuContext ctx, GpuStream stream, int halfBytes) {
    this.stream = stream;
    this.half = halfBytes;
    this.pinned = ctx.allocatePinned(2L * halfBytes);
    try {
      free[0] = ctx.createEvent(false);
      free[1] = ctx.createEvent(false);
    } catch (RuntimeException e) {
      if (free[0] != null) {
        free[0].close();
      }
      pinned.close();
      throw e;
    }
  }

  /** Copies {@code bytes} of {@code source} to device address {@code device}, in staging-sized parts. */
  public void copy(long device, long bytes, Source source) throws IOException {
    for (long at = 0; at < bytes; at += half) {
      int len = (int) Math.min(half, bytes - at);
      if (inFlight[slot]) {
        free[slot].synchronize();
      }
      ByteBuffer view = pinned.slice((long) slot * half, len);
      source.read(at, view);
      stream.copyHostToDeviceAsync(device + at, pinned, (long) slot * half, len);
      free[slot].record(stream);
      inFlight[slot] = true;
      slot ^= 1;
    }
  }

  /** Waits for every copy, then frees the staging. Idempotent. */
  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    try {
      stream.synchronize();
    } finally {
      free[0].close();
      free[1].close();
      pinned.close();
    }
  }
}
