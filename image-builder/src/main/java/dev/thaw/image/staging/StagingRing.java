package dev.thaw.image.staging;

import dev.thaw.image.staging.Staging;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.host.Threads;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CompletionStage;
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

  private final List<CompletableFuture<PinnedBuffer>> buffers;
  private final long bytes;
  private final GpuEvent[] done;
  private final Semaphore[] free;
  /** Completes when every buffer is made or has failed (at once for {@link #allocate}). */
  private final CompletableFuture<Void> allocated;
  /** Completed at {@link #close}: buffers still waiting to be made behind are not made. */
  private final CompletableFuture<Void> closing;
  private int next;
  private boolean closed;

  private StagingRing(List<CompletableFuture<PinnedBuffer>> buffers, long bytes, GpuEvent[] done,
      CompletableFuture<Void> allocated, CompletableFuture<Void> closing) {
    this.buffers = buffers;
    this.closing = closing;
    this.bytes = bytes;
    this.done = done;
    this.allocated = allocated;
    this.free = new Semaphore[buffers.size()];
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
    return allocate(context, count, bytes, count);
  }

  /**
   * {@code count} pinned buffers of {@code bytes} each on {@code context}: the first {@code now} before it returns,
   * the others in ring order on a thread of its own, so that an owner that makes its staging ahead (a pool worker
   * before it says READY) does not wait for all of it (pinning is paid per page: {@code
   * docs/design/on-demand-restore.md}). A pipeline that reaches a slot still being made waits for it; a slot that could not be made
   * fails the pipeline that takes it, with the allocation's error.
   *
   * @throws IllegalArgumentException unless {@link Staging#checkBuffers} and {@link Staging#checkBytes} allow them
   *     and {@code now} is 1 to {@code count}
   */
  public static StagingRing allocate(GpuContext context, int count, long bytes, int now) {
    return allocate(context, count, bytes, now, CompletableFuture.completedFuture(null));
  }

  /**
   * {@link #allocate(GpuContext, int, long, int)}, the others pinned only once {@code behindAfter} completed (how,
   * is not asked): an owner whose own next steps need the driver (a pool worker loading its first image's modules)
   * keeps them out of the pinning's way, which the driver serialises with them.
   */
  public static StagingRing allocate(GpuContext context, int count, long bytes, int now,
      CompletionStage<?> behindAfter) {
    Staging.checkBuffers(count);
    Staging.checkBytes(bytes);
    if (now < 1 || now > count) {
      throw new IllegalArgumentException("buffers made at once must be 1 to " + count + ", not " + now);
    }
    List<CompletableFuture<PinnedBuffer>> buffers = new ArrayList<>();
    GpuEvent[] done = new GpuEvent[count];
    List<AutoCloseable> made = new ArrayList<>();
    try {
      for (int i = 0; i < count; i++) {
        done[i] = context.createEvent(false);
        made.add(done[i]);
        buffers.add(i < now ? CompletableFuture.completedFuture(context.allocatePinned(bytes))
            : new CompletableFuture<>());
        if (i < now) {
          made.add(buffers.get(i).join());
        }
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
    CompletableFuture<Void> allocated = new CompletableFuture<>();
    CompletableFuture<Void> closing = new CompletableFuture<>();
    if (now == count) {
      allocated.complete(null);
    } else {
      Threads.startDaemon(() -> {
        try {
          try {
            CompletableFuture.anyOf(behindAfter.toCompletableFuture(), closing).join();
          } catch (RuntimeException e) {
            // Whatever it ended with, the buffers are made now.
          }
          if (closing.isDone()) {
            IllegalStateException gone =
                new IllegalStateException("the staging was closed before this buffer was made");
            for (int j = now; j < count; j++) {
              buffers.get(j).completeExceptionally(gone);
            }
            return;
          }
          for (int i = now; i < count; i++) {
            try {
              buffers.get(i).complete(context.allocatePinned(bytes));
            } catch (RuntimeException | Error e) {
              for (int j = i; j < count; j++) {
                buffers.get(j).completeExceptionally(e);
              }
              return;
            }
          }
        } finally {
          allocated.complete(null);
        }
      }, "thaw-staging-alloc");
    }
    return new StagingRing(buffers, bytes, done, allocated, closing);
  }

  public int size() {
    return buffers.size();
  }

  /** Completes once every buffer is made, or one could not be (then at once for {@link #allocate} all now). */
  public CompletableFuture<Void> allocated() {
    return allocated.copy();
  }

  /** Bytes of each buffer. */
  public long bytes() {
    return bytes;
  }

  /**
   * The slot's buffer; waits for it while it is still being made.
   *
   * @throws RuntimeException the allocation's own error if the buffer could not be made
   */
  public PinnedBuffer buffer(int slot) {
    try {
      return buffers.get(slot).join();
    } catch (CompletionException e) {
      throw e.getCause() instanceof RuntimeException r ? r : e;
    }
  }

  /**
   * True when the slot {@link #acquire} takes next is made: a caller that only reads ahead (and need not wait) takes
   * it only then, so that buffers still being pinned behind keep out of its way.
   */
  public boolean nextIsMade() {
    CompletableFuture<PinnedBuffer> b = buffers.get(next);
    return b.isDone() && !b.isCompletedExceptionally();
  }

  /**
   * The next slot in ring order, once the host has released it and the device has completed the work last queued on
   * it. Blocks the calling pipeline thread.
   */
  public int acquire() {
    int slot = next;
    next = (next + 1) % buffers.size();
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

  /**
   * Frees the buffers and events; every pipeline using them must have finished. Waits for buffers still being made.
   * Idempotent.
   */
  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    closing.complete(null);
    allocated.join();
    for (int i = 0; i < buffers.size(); i++) {
      done[i].close();
      CompletableFuture<PinnedBuffer> b = buffers.get(i);
      if (!b.isCompletedExceptionally()) {
        b.join().close();
      }
    }
  }
}
