package dev.thaw.image.restore;

import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.GpuEvent;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.function.Consumer;

/**
 * An on-demand restore in progress, and the function it serves: {@link #function()} can be invoked at once, while
 * the image's bytes are still streaming in; every launch waits on the device, never on the host, for what it may
 * touch. Closing it waits for the copies still queued, gives the restore's resources back and frees the function's
 * session.
 */
public final class OnDemandRestore implements AutoCloseable {

  /**
   * Where the restore's host time went before the function could be invoked, in milliseconds.
   *
   * @param modulesMillis reading the cubins and loading the modules
   * @param mapMillis mapping the allocations at their recorded addresses
   * @param stateMillis reading the host state
   * @param readyMillis from the call to the function being invocable (the three above, and starting the restore)
   */
  public record Timings(double modulesMillis, double mapMillis, double stateMillis, double readyMillis) {}

  /**
   * What the restore did.
   *
   * @param bytes device bytes of the image
   * @param hostBytes bytes copied from a host tier, over any link
   * @param storeBytes bytes read from the store, verified and copied
   * @param residentBytes bytes of allocations that were resident already (the HBM tier): not copied
   * @param copies copies queued (through a helper's link, its host copies and its pulls)
   * @param promotions allocations a launch moved to the head of the restore
   * @param waits waits the gate queued for an allocation not yet resident
   * @param fullWaits waits for full residency (kernels not gated on their arguments)
   * @param stagedUploads uploads of the function's that were queued behind a wait
   * @param peerBytes bytes copied from another GPU's memory (the node-wide HBM tier)
   * @param helperBytes of {@code hostBytes}, those that came through other GPUs' links ({@link HelperLink})
   */
  public record Stats(long bytes, long hostBytes, long storeBytes, long residentBytes, int copies, int promotions,
      long waits, long fullWaits, long stagedUploads, long peerBytes, long helperBytes) {}

  /**
   * The write protection of the image's read-only slabs ({@code cuMemSetAccess} to read-only), which {@link
   * #protectReadOnlySlabs} sets while the function is idle, once the restore is resident.
   *
   * @param slabs read-only slabs protected so far
   * @param of read-only slabs this restore protects (those imported read-only from the HBM tier are not counted)
   * @param bytes their size
   * @param millis time spent in {@code cuMemSetAccess} for them
   * @param refused why the device refused to protect a slab (it is left writable and never handed on), or null
   */
  public record Protection(int slabs, int of, long bytes, double millis, String refused) {}

  private final RestoredFunction<?> function;
  private final Residency residency;
  private final ResidencyGate gate;
  private final ResidencyValidator validator;
  private final RestoreTrace trace;
  private final RestoreResources resources;
  private final Timings timings;
  private boolean closed;

  OnDemandRestore(RestoredFunction<?> function, Residency residency, ResidencyGate gate, ResidencyValidator validator,
      RestoreTrace trace, RestoreResources resources, Timings timings) {
    this.function = function;
    this.residency = residency;
    this.gate = gate;
    this.validator = validator;
    this.trace = trace;
    this.resources = resources;
    this.timings = timings;
  }

  /** The restored function, gated: invoke it at once. */
  public RestoredFunction<?> function() {
    return function;
  }

  public RestorePlan plan() {
    return residency.plan();
  }

  public Timings timings() {
    return timings;
  }

  public RestoreTrace trace() {
    return trace;
  }

  /** True once every allocation is resident. Never blocks. */
  public boolean isResident() {
    return residency.isComplete();
  }

  /** Completes when every allocation is resident; fails with what stopped the restore (a corrupt chunk, …). */
  public CompletableFuture<Void> resident() {
    return residency.done();
  }

  /** Blocks until every allocation is resident: for a full restore, tests and teardown, never on the gated path. */
  public void awaitResident() {
    try {
      residency.done().get();
    } catch (ExecutionException e) {
      Throwable c = e.getCause();
      if (c instanceof RuntimeException r) {
        throw r;
      }
      throw new ImageRestoreException("the restore failed: " + c, c);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new ImageRestoreException("interrupted while waiting for the restore", e);
    }
  }

  /** Starts streaming what no launch asked for, when {@link OnDemandOptions#streamInBackground} was off. */
  public void streamRest() {
    residency.streamRest();
  }

  /** The timing event recorded on the idle restore stream when the restore began: time zero of the trace. */
  public GpuEvent originEvent() {
    return trace.origin();
  }

  /**
   * Milliseconds from {@link #originEvent()} to the moment {@code allocation} became resident, by the event recorded
   * after its copies; 0 for one that was resident before the restore began.
   *
   * @throws IllegalStateException if its copies are not queued yet
   * @throws IllegalArgumentException if the image has no such allocation
   */
  public double residentMillis(String allocation) {
    int u = residency.plan().unitOf(allocation);
    if (u < 0) {
      throw new IllegalArgumentException("the image has no allocation '" + allocation + "'");
    }
    GpuEvent e = residency.event(u);
    if (e == null) {
      if (residency.state(u) == Residency.RESIDENT) {
        return 0;
      }
      throw new IllegalStateException("allocation '" + allocation + "' is not queued yet");
    }
    return e.elapsedMillisSince(trace.origin());
  }

  /**
   * When the last allocation became resident, on the {@link System#nanoTime()} clock (by the events recorded after
   * the copies, not when the restore thread noticed). Call once {@link #isResident()}.
   */
  public long residentNanos() {
    long latest = trace.originNanos();
    RestorePlan plan = residency.plan();
    for (int u = 0; u < plan.unitCount(); u++) {
      GpuEvent e = residency.event(u);
      if (e != null) {
        latest = Math.max(latest, trace.originNanos() + (long) (e.elapsedMillisSince(trace.origin()) * 1e6));
      }
    }
    return latest;
  }

  /**
   * What the validating mode found ({@link OnDemandOptions#setValidate(boolean)}).
   *
   * @param checked launches run instrumented
   * @param unchecked launches run plain because their module could not be instrumented
   * @param violations accesses of bytes that were neither resident nor waited for
   * @param described the first of them, with kernel, address and allocation
   */
  public record Validation(long checked, long unchecked, long violations, List<String> described) {}

  /** @throws IllegalStateException unless the restore runs in validating mode */
  public Validation validation() {
    if (validator == null) {
      throw new IllegalStateException("this restore does not validate; see OnDemandOptions.validate");
    }
    long[] c = validator.counts();
    return new Validation(c[0], c[1], c[2], validator.violations());
  }

  public Stats stats() {
    Residency.Stats r = residency.stats();
    long[] g = gate.counts();
    long bytes = residency.plan().totalBytes();
    return new Stats(bytes, r.hostBytes(), r.storeBytes(), bytes - r.hostBytes() - r.storeBytes() - r.peerBytes(),
        r.copies(), r.promotions(), g[0], g[1], g[2], r.peerBytes(), r.helperBytes());
  }

  /**
   * Bytes copied through each way in, in order: {@code direct} (the device's own link, store reads included),
   * {@code urgent} (promotions on a second stream), {@code peer} (from another GPU's memory), {@code device N} (through
   * helper device N's link).
   */
  public Map<String, Long> linkBytes() {
    return residency.laneBytes();
  }

  /**
   * The start addresses of read-only slabs that may have been written before they were protected (see
   * {@link ResidencyGate}): a launch pointed into one while it was writable and its kernel may store through that
   * argument, or the session's own device access touched it. Their bytes may differ from the image's: never hand them
   * on (the HBM tier). Reads the modules' PTX: off the request path, with the function idle.
   */
  public List<Long> mayHaveBeenWritten() {
    return gate.mayHaveWritten();
  }

  /** The read-only slabs' write protection so far; complete once {@link #protectReadOnlySlabs} returned true. */
  public Protection protection() {
    return residency.protection().stats();
  }

  /**
   * Makes the image's read-only slabs read-only on the device, once the restore is resident: from then on a store
   * into them faults (a sticky {@code CUDA_ERROR_ILLEGAL_ADDRESS}) instead of changing weights the HBM tier may hand
   * to the next worker. Call it only while no request of this function runs and nothing else queues work for it (a
   * pool worker: after a request's answer is sent and before the next request runs, and before an EXPORT): the driver
   * changes the mapping under whatever work is in flight, and a kernel or copy using the slab then may fault. It
   * synchronizes the context first, so work the last request left queued has finished. Costs a {@code cuMemSetAccess}
   * per slab once; later calls return at once.
   *
   * @return true once the slabs are protected (or protection was tried and a slab refused: see {@link
   *     #protection()}), false while the restore still copies: call again at the next idle point
   * @throws CudaException with a sticky error: the context is lost
   */
  public boolean protectReadOnlySlabs() {
    SlabProtection p = residency.protection();
    if (p.tried()) {
      return true;
    }
    if (closed || !residency.landed()) {
      return false;
    }
    function.session().context().synchronize();
    p.protectAll();
    return true;
  }

  /**
   * Waits for the copies still queued and the function's work, gives the restore's resources back, and frees the
   * function's session (its allocations and modules). Idempotent.
   */
  @Override
  public void close() {
    close(session -> { });
  }

  /**
   * Closes as {@link #close()} does, handing the function's session to {@code beforeFree} once the copies, the
   * function's engine and its work have stopped and before its memory is freed (a pooled worker that keeps its
   * context for another image scrubs that memory there). The rest of the close happens also when it fails.
   */
  public void close(Consumer<FunctionSession> beforeFree) {
    if (closed) {
      return;
    }
    closed = true;
    try {
      residency.stop();
      function.session().synchronize();
    } finally {
      try {
        gate.close();
        if (validator != null) {
          validator.close();
        }
        trace.release();
        function.close(session -> {
          session.synchronize();
          beforeFree.accept(session);
        });
      } finally {
        resources.giveBack();
      }
    }
  }
}
