package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.host.Threads;
import java.util.ArrayDeque;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A simulated stream: a daemon worker thread that runs the stream's work in submission order. Host-side
 * arguments are checked on the caller's thread before anything is queued; device addresses are checked
 * again when the work runs, where a range that was unmapped meanwhile is an illegal address, as on a GPU.
 */
final class SimStream implements GpuStream {

  private static final Logger LOG = LoggerFactory.getLogger(SimStream.class);

  /** Queued work. {@link #discard} runs instead of {@link #run} when the context is destroyed first. */
  interface Task {
    void run() throws InterruptedException;

    default void discard() {}
  }

  private final SimContext context;
  private final Thread worker;
  private final ReentrantLock lock = new ReentrantLock();
  private final Condition work = lock.newCondition();
  private final Condition done = lock.newCondition();
  private final ArrayDeque<Task> queue = new ArrayDeque<>();
  private long submitted;
  private long completed;
  private boolean draining;
  private boolean aborting;
  private volatile boolean closed;

  SimStream(SimContext context, String name) {
    this.context = context;
    this.worker = Threads.daemon(this::loop, name);
  }

  void start() {
    worker.start();
  }

  Thread worker() {
    return worker;
  }

  @Override
  public GpuContext context() {
    return context;
  }

  // ---- work ----

  @Override
  public void copyHostToDeviceAsync(long dstDevice, PinnedBuffer src, long srcOffset, long bytes) {
    String call = "cuMemcpyHtoDAsync_v2";
    checkOpen();
    SimPinnedBuffer pinned = context.pinned(src);
    pinned.checkRange(srcOffset, bytes);
    context.checkUsable(call);
    if (bytes == 0) {
      return;
    }
    context.checkDeviceRange(call, dstDevice, bytes, true);
    enqueueUsing(pinned, () -> context.runToDevice(call, dstDevice, pinned.address() + srcOffset, bytes));
  }

  @Override
  public void copyDeviceToHostAsync(PinnedBuffer dst, long dstOffset, long srcDevice, long bytes) {
    String call = "cuMemcpyDtoHAsync_v2";
    checkOpen();
    SimPinnedBuffer pinned = context.pinned(dst);
    pinned.checkRange(dstOffset, bytes);
    if (pinned.isReadOnly()) {
      throw new IllegalArgumentException(pinned + " is registered read-only: nothing can be copied into it");
    }
    context.checkUsable(call);
    if (bytes == 0) {
      return;
    }
    context.checkDeviceRange(call, srcDevice, bytes, false);
    enqueueUsing(pinned, () -> context.runToHost(call, pinned.address() + dstOffset, srcDevice, bytes));
  }

  /** Queues work on {@code pinned}: the buffer stays allocated until the work has run or been discarded. */
  private void enqueueUsing(SimPinnedBuffer pinned, Runnable work) {
    pinned.retain();
    enqueue(new Task() {
      @Override
      public void run() {
        try {
          work.run();
        } finally {
          pinned.release();
        }
      }

      @Override
      public void discard() {
        pinned.release();
      }
    });
  }

  @Override
  public void copyDeviceToDeviceAsync(long dstDevice, long srcDevice, long bytes) {
    String call = "cuMemcpyDtoDAsync_v2";
    checkOpen();
    context.checkUsable(call);
    if (bytes < 0) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_VALUE, "negative size " + bytes);
    }
    if (bytes == 0) {
      return;
    }
    context.checkDeviceRange(call, srcDevice, bytes, false);
    context.checkDeviceRange(call, dstDevice, bytes, true);
    enqueue(() -> context.runDeviceToDevice(call, dstDevice, srcDevice, bytes));
  }

  @Override
  public void copyPeerAsync(long dstDevice, GpuContext dstContext, long srcDevice, GpuContext srcContext,
      long bytes) {
    String call = "cuMemcpyPeerAsync";
    checkOpen();
    SimContext dst = peerContext(dstContext, "destination context");
    SimContext src = peerContext(srcContext, "source context");
    context.checkUsable(call);
    if (bytes < 0) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_VALUE, "negative size " + bytes);
    }
    if (bytes == 0) {
      return;
    }
    src.checkOwnRange(call, srcDevice, bytes, false);
    dst.checkOwnRange(call, dstDevice, bytes, true);
    enqueue(() -> context.runPeer(call, dstDevice, dst, srcDevice, src, bytes));
  }

  private SimContext peerContext(GpuContext given, String what) {
    if (!(given instanceof SimContext c) || c.driver() != context.driver()) {
      throw new IllegalArgumentException(what + " " + given + " is not a context of this simulated device");
    }
    c.checkOpen();
    return c;
  }

  @Override
  public void memsetD8Async(long dstDevice, byte value, long bytes) {
    String call = "cuMemsetD8Async";
    checkOpen();
    context.checkUsable(call);
    if (bytes == 0) {
      return;
    }
    context.checkDeviceRange(call, dstDevice, bytes, true);
    enqueue(() -> context.runMemset(call, dstDevice, bytes, segs -> SimAddressSpace.fill8(segs, dstDevice, value, bytes)));
  }

  @Override
  public void memsetD32Async(long dstDevice, int value, long count) {
    String call = "cuMemsetD32Async";
    checkOpen();
    context.checkUsable(call);
    long bytes = SimContext.memset32Bytes(call, dstDevice, count);
    if (bytes == 0) {
      return;
    }
    context.checkDeviceRange(call, dstDevice, bytes, true);
    enqueue(() -> context.runMemset(call, dstDevice, bytes, segs -> SimAddressSpace.fill32(segs, dstDevice, value, count)));
  }

  @Override
  public void waitFor(GpuEvent event) {
    checkOpen();
    SimEvent e = context.driverEvent(event);
    context.checkUsable("cuStreamWaitEvent");
    SimEvent.Marker marker = e.latest();
    if (marker == null || marker.isDone()) {
      return;
    }
    enqueue(marker::await);
  }

  /** True while work submitted to this stream has not completed: no checks, for the context's own questions. */
  boolean busy() {
    lock.lock();
    try {
      return completed != submitted;
    } finally {
      lock.unlock();
    }
  }

  @Override
  public boolean isIdle() {
    checkOpen();
    context.checkUsable("cuStreamQuery");
    lock.lock();
    try {
      return completed == submitted;
    } finally {
      lock.unlock();
    }
  }

  @Override
  public void synchronize() {
    checkOpen();
    context.checkUsable("cuStreamSynchronize");
    awaitSubmitted();
    context.checkUsable("cuStreamSynchronize");
  }

  /** Waits, uninterruptibly as the CUDA call does, for everything submitted so far. */
  void awaitSubmitted() {
    lock.lock();
    try {
      long target = submitted;
      while (completed < target) {
        done.awaitUninterruptibly();
      }
    } finally {
      lock.unlock();
    }
  }

  /** Queues {@code task}. The caller has checked the stream and its context. */
  void enqueue(Task task) {
    lock.lock();
    try {
      if (closed || aborting) {
        throw new IllegalStateException("stream is closed");
      }
      queue.addLast(task);
      submitted++;
      work.signal();
    } finally {
      lock.unlock();
    }
  }

  void checkOpen() {
    if (closed) {
      throw new IllegalStateException("stream is closed");
    }
  }

  // ---- the worker ----

  private void loop() {
    try {
      for (;;) {
        Task task;
        lock.lock();
        try {
          for (;;) {
            if (aborting) {
              dropQueued();
              return;
            }
            task = queue.pollFirst();
            if (task != null) {
              break;
            }
            if (draining) {
              return;
            }
            try {
              work.await();
            } catch (InterruptedException e) {
              // Only abort() interrupts; the flag it set is checked above.
            }
          }
        } finally {
          lock.unlock();
        }
        try {
          task.run();
        } catch (InterruptedException e) {
          // abort() while waiting on an event: the next turn drops the rest.
        } catch (RuntimeException | Error e) {
          LOG.error("Simulated stream work failed unexpectedly", e);
        }
        lock.lock();
        try {
          completed++;
          done.signalAll();
        } finally {
          lock.unlock();
        }
      }
    } finally {
      context.streamEnded(this);
    }
  }

  /** Under the lock: the context is going away; queued work will not run. */
  private void dropQueued() {
    for (Task t; (t = queue.pollFirst()) != null; ) {
      try {
        t.discard();
      } catch (RuntimeException e) {
        LOG.warn("Discarding simulated stream work failed", e);
      }
      completed++;
    }
    done.signalAll();
  }

  /** Stops the worker without running what is queued; the context is being destroyed. */
  void abort() {
    closed = true;
    lock.lock();
    try {
      aborting = true;
      work.signal();
    } finally {
      lock.unlock();
    }
    worker.interrupt();
  }

  void join() {
    boolean interrupted = false;
    while (worker.isAlive()) {
      try {
        worker.join();
      } catch (InterruptedException e) {
        interrupted = true;
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  /** The worker finishes what was submitted, then ends. Returns at once, as {@code cuStreamDestroy} does. */
  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    lock.lock();
    try {
      draining = true;
      work.signal();
    } finally {
      lock.unlock();
    }
  }

  @Override
  public String toString() {
    return "SimStream[" + worker.getName() + "]";
  }
}
