package dev.thaw.runtime.gpu.cuda;

import java.lang.ref.Cleaner;
import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What every CUDA handle shares: an idempotent {@link #close()}, {@link IllegalStateException} on use after
 * close naming the object, and a {@link Cleaner} that only <em>reports</em> a handle that became unreachable
 * unclosed. Freeing is never left to the garbage collector.
 *
 * <p>A handle owned by a context registers with it when created; the context frees what is still open
 * when it is closed, before it destroys itself. Each handle frees its native resource at most once.
 */
abstract class CudaResource implements AutoCloseable {

  private static final Logger LOG = LoggerFactory.getLogger(CudaResource.class);
  private static final Cleaner LEAKS = Cleaner.create();

  /** The order in which a closing context frees what it still owns: work first, memory last. */
  static final int RANK_STREAM = 0;
  static final int RANK_EVENT = 1;
  static final int RANK_MODULE = 2;
  static final int RANK_MAPPING = 3;
  static final int RANK_RANGE = 4;
  static final int RANK_PHYSICAL = 5;
  static final int RANK_PINNED = 6;

  /** The owning context; null only for a context itself. */
  final CudaContext context;
  private final AtomicBoolean closed = new AtomicBoolean();
  private final Cleaner.Cleanable leakReport;

  CudaResource(CudaContext context, String what) {
    this.context = context;
    this.leakReport = LEAKS.register(this, new LeakReport(closed, what));
  }

  /** What this is, for messages: {@code CUDA stream 0x7f...}. */
  abstract String describe();

  /** Frees the native resource. Runs once, with the owning context current and not yet destroyed. */
  abstract void free();

  /** See the {@code RANK_*} constants. */
  abstract int rank();

  final boolean isClosed() {
    return closed.get();
  }

  /** Throws if this, or the context that owns it, is closed. */
  final void checkOpen() {
    if (closed.get()) {
      throw new IllegalStateException(describe() + " is closed");
    }
    if (context != null && context.isClosed()) {
      throw new IllegalStateException(describe() + " belongs to a closed CUDA context");
    }
  }

  /** Frees the resource once; later calls do nothing. */
  @Override
  public void close() {
    if (closed.compareAndSet(false, true)) {
      leakReport.clean();
      dispose();
    }
  }

  /** Runs once, from the first {@link #close()}. A context overrides it to tear itself down. */
  void dispose() {
    context.forget(this);
    context.release(this);
  }

  @Override
  public String toString() {
    return describe();
  }

  /** Holds no reference to the resource, only its closed flag and its description. */
  private static final class LeakReport implements Runnable {
    private final AtomicBoolean closed;
    private final String what;

    LeakReport(AtomicBoolean closed, String what) {
      this.closed = closed;
      this.what = what;
    }

    @Override
    public void run() {
      if (!closed.get()) {
        LOG.warn("{} became unreachable without close(); the garbage collector does not free it", what);
      }
    }
  }
}
