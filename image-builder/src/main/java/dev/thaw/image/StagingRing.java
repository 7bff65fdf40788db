package dev.thaw.image;

import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PinnedBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Semaphore;

/**
 * The pinned staging every build and restore streams device memory through: a ring of equal pinned buffers, each
 * with an event. A slot is taken in ring order ({@link #acquire}) once two things are true: the host is done with it
 * ({@link #release}: its chunks hashed, or its copy queued), and the device is done with it (the event {@link #queued}
 * recorded after the last copy that used it has completed). Builds copy device → slot → hash; restores read → verify
 * → slot → device, queuing the copy only after every chunk in the slot is verified.
 *
 * <p>Made by a long-lived owner (a pooled worker's restore resources, a CLI command) and lent to one pipeline at a
 * time; {@link #acquire} blocks the pipeline's own thread, never a request's. Not thread-safe apart from
 * {@link #release}, which a hashing thread may call.
 */
public final class StagingRing implements AutoCloseable {

  private final PinnedBuffer[] buffers;
  private final GpuEvent[] done;
  private final Semaphore[] free;
  private int next;
  private boolean closed;

  private StagingRing(PinnedBuffer[] buffers, GpuEvent[] done) {
    this.buffers = buffers;
    this.done = done;
    this.free = new Semaphore[buffers.length];
    for (int i = 0; i < free.length; i++) {
      free[i] = new Semaphore(1);
    }
  }

  /**
   * {@code count} pinned buffers of {@code bytes} each on {@code context}.
   *
   * @throws IllegalArgumentException unless {@link Staging#checkBuffers} and {@link Staging#checkBytes} allow them
   */
  public static StagingRing allocate(GpuContext context, int count, long bytes) {
    Staging.checkBuffers(count);
    Staging.checkBytes(bytes);
    PinnedBuffer[] buffers = new PinnedBuffer[count];
    GpuEvent[] done = new GpuEvent[count];
    List<AutoCloseable> made = new ArrayList<>();
    try {
      for (int i = 0; i < count; i++) {
        buffers[i] = context.allocatePinned(bytes);
        made.add(buffers[i]);
        done[i] = context.createEvent(false);
        made.add(done[i]);
      }
    } catch (RuntimeException e) {
      for (AutoCloseable c : made) {
        try {
          c.close();
        } catch (Exception suppressed) {
          e.addSuppressed(suppressed);
        }
      }
      throw e;
    }
    return new StagingRing(buffers, done);
  }

  public int size() {
    return buffers.length;
  }

  /** Bytes of each buffer. */
  public long bytes() {
    return buffers[0].size();
  }

  public PinnedBuffer buffer(int slot) {
    return buffers[slot];
  }

  /**
   * The next slot in ring order, once the host has released it and the device has completed the work last queued on
   * it. Blocks the calling pipeline thread.
   */
  public int acquire() {
    int slot = next;
    next = (next + 1) % buffers.length;
    free[slot].acquireUninterruptibly();
    done[slot].synchronize();
    return slot;
  }

  /** The slot's device work is queued on {@code stream}: it may be taken again once that work completes. */
  public void queued(int slot, GpuStream stream) {
    stream.record(done[slot]);
  }

  /** The host is done with the slot. */
  public void release(int slot) {
    free[slot].release();
  }

  /** Blocks until the device work last {@link #queued} on the slot has completed (e.g. its device → host copy). */
  public void awaitDevice(int slot) {
    done[slot].synchronize();
  }

  /** Frees the buffers and events; every pipeline using them must have finished. Idempotent. */
  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    for (int i = 0; i < buffers.length; i++) {
      done[i].close();
      buffers[i].close();
    }
  }
}
