package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import java.util.concurrent.CountDownLatch;

/** A simulated event: each record is a {@link Marker} that the stream completes when it gets there. */
final class SimEvent implements GpuEvent {

  /** One record of an event: done when the work submitted before it has completed. */
  static final class Marker {
    private final CountDownLatch latch = new CountDownLatch(1);
    private volatile long nanos;

    void complete(long nanoTime) {
      nanos = nanoTime;
      latch.countDown();
    }

    boolean isDone() {
      return latch.getCount() == 0;
    }

    long nanos() {
      return nanos;
    }

    void await() throws InterruptedException {
      latch.await();
    }

    void awaitUninterruptibly() {
      boolean interrupted = false;
      while (true) {
        try {
          latch.await();
          break;
        } catch (InterruptedException e) {
          interrupted = true;
        }
      }
      if (interrupted) {
        Thread.currentThread().interrupt();
      }
    }
  }

  private final SimContext context;
  private final boolean timing;
  private volatile Marker latest;
  private volatile boolean closed;

  SimEvent(SimContext context, boolean timing) {
    this.context = context;
    this.timing = timing;
  }

  SimContext context() {
    return context;
  }

  Marker latest() {
    return latest;
  }

  @Override
  public void record(GpuStream stream) {
    checkOpen();
    SimStream s = context.ownStream(stream, "cuEventRecord");
    Marker m = new Marker();
    s.enqueue(new SimStream.Task() {
      @Override
      public void run() {
        m.complete(System.nanoTime());
      }

      @Override
      public void discard() {
        // Nobody may wait forever on a stream that no longer exists.
        m.complete(System.nanoTime());
      }
    });
    latest = m;
  }

  @Override
  public boolean isComplete() {
    checkOpen();
    context.checkUsable("cuEventQuery");
    Marker m = latest;
    return m == null || m.isDone();
  }

  @Override
  public void synchronize() {
    checkOpen();
    context.checkUsable("cuEventSynchronize");
    Marker m = latest;
    if (m != null) {
      m.awaitUninterruptibly();
    }
    context.checkUsable("cuEventSynchronize");
  }

  @Override
  public float elapsedMillisSince(GpuEvent start) {
    String call = "cuEventElapsedTime";
    checkOpen();
    SimEvent s = context.driverEvent(start);
    s.checkOpen();
    context.checkUsable(call);
    if (!timing || !s.timing) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_HANDLE, "an event was created without timing");
    }
    Marker end = latest;
    Marker begin = s.latest;
    if (end == null || begin == null) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_HANDLE, "an event was never recorded");
    }
    if (!end.isDone() || !begin.isDone()) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_NOT_READY, "an event has not completed");
    }
    return (float) ((end.nanos() - begin.nanos()) / 1e6);
  }

  void checkOpen() {
    if (closed) {
      throw new IllegalStateException("event is closed");
    }
  }

  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    context.forget(this);
  }
}
