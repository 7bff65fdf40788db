package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.ImageRestorer;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.image.restore.OnDemandRestore;
import dev.thaw.image.restore.OnDemandRestorer;
import dev.thaw.image.restore.PreparedRestore;
import dev.thaw.image.restore.RestorePlan;
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.restore.RestoreTimings;
import dev.thaw.image.restore.RestoredFunction;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.function.FunctionEngine;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.server.ServeException;
import dev.thaw.server.ServerLogs;
import dev.thaw.server.StartupTimeline;
import dev.thaw.server.spi.FunctionInstance;
import dev.thaw.server.spi.InstanceFactory;
import dev.thaw.server.spi.StartPhases;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Instances in this process: each a fresh context on the driver with the image restored into it, on demand by
 * {@link OnDemandRestorer} (the default: invocable once mapped, bytes streamed in behind, each launch waiting on
 * the device for what it may touch) or fully by {@link ImageRestorer}. Right for the simulated device, for
 * {@code thaw demo} and for one tenant; every instance shares the process's address space, so images whose
 * recorded addresses overlap cannot be resident together (the server evicts or refuses), and a device fault takes
 * the context with it (the instance turns unhealthy and is evicted). A sticky CUDA error (an illegal address) leaves
 * CUDA unusable in the whole process: from then on every instance is unhealthy, nothing starts or runs (503
 * {@code device_fault}) and the factory says it is {@link #poisoned()}, which fails the server's liveness so that
 * its supervisor (the kubelet) restarts it. Worker processes ({@link PoolInstances}) contain such a fault instead.
 */
public final class InProcessInstances implements InstanceFactory {

  private static final Logger LOG = LoggerFactory.getLogger(ServerLogs.INSTANCES);

  /** How an instance gets its image's bytes. */
  public enum Restore {
    /** Invocable once mapped; the bytes stream in behind, launches gated by speculation. */
    ON_DEMAND,
    /** Every byte on the device before the first request: the baseline. */
    FULL
  }


  private final GpuDriver driver;
  private final ChunkStore store;
  private final Supplier<GpuDriver> ownDriver;
  private final Restore restore;
  /** A context (and its restore resources) made ahead of the first start, taken by it; null when none. */
  private volatile Prepared prepared;
  private volatile StartupTimeline timeline;
  /** Why CUDA in this process is unusable (the first sticky error), or null. */
  private final AtomicReference<String> poisoned;

  /**
   * A context and restore resources being made on a thread of their own ({@link #prepareContext}), for the first
   * on-demand start on {@code device}.
   */
  public record Prepared(int device, CompletableFuture<GpuContext> context, CompletableFuture<PreparedContext> made,
      AtomicBoolean taken, AtomicReference<ImageAhead> image) {

    /** Closes the context (and an image prepared in it) unless a start took it (a server that failed to start). */
    public void closeUntaken() {
      if (taken.compareAndSet(false, true)) {
        ImageAhead ahead = image.get();
        CompletableFuture<?> after = ahead == null ? CompletableFuture.completedFuture(null)
            : ahead.restore().handle((r, e) -> {
              if (r != null) {
                r.close();
              }
              return null;
            });
        after.thenCompose(v -> made).thenAccept(PreparedContext::close);
      }
    }
  }

  /**
   * The first registered image, prepared ({@link OnDemandRestorer#prepare}) in the prepared context once it is made:
   * class, state and modules, so the first start only maps and starts copying. {@code manifest} is the
   * registration's, by identity.
   */
  private record ImageAhead(String tag, ImageManifest manifest, CompletableFuture<PreparedRestore> restore) {}

  /** A prepared context and its restore resources. */
  public record PreparedContext(GpuContext context, RestoreResources resources) {
    void close() {
      resources.close();
      context.close();
    }
  }

  /** Every instance a context on {@code driver}, all in its one address space, restored on demand. */
  public InProcessInstances(GpuDriver driver, ChunkStore store) {
    this(driver, store, null, Restore.ON_DEMAND);
  }

  private InProcessInstances(GpuDriver driver, ChunkStore store, Supplier<GpuDriver> ownDriver, Restore restore) {
    this(driver, store, ownDriver, restore, new AtomicReference<>());
  }

  private InProcessInstances(GpuDriver driver, ChunkStore store, Supplier<GpuDriver> ownDriver, Restore restore,
      AtomicReference<String> poisoned) {
    this.poisoned = poisoned;
    this.driver = driver;
    this.store = store;
    this.ownDriver = ownDriver;
    this.restore = restore;
  }

  /**
   * Starts making a context and its restore resources on {@code device} of {@code driver} now, on a thread of its
   * own, for the first start of a factory to take ({@link #takePrepared(Prepared)}): a server that knows its function
   * at start (contract mode) then pays for the context while it opens the store and starts listening, not on its
   * first request. Marks {@code context} and {@code restore resources} on {@code timeline} (may be null).
   */
  public static Prepared prepareContext(GpuDriver driver, int device, StartupTimeline timeline) {
    CompletableFuture<GpuContext> context = new CompletableFuture<>();
    CompletableFuture<PreparedContext> made = new CompletableFuture<>();
    Thread arena = new Thread(() -> {
      try {
        driver.prepareDevice(device);
        mark(timeline, "address arena");
      } catch (RuntimeException e) {
        // The context makes the arena itself, or fails saying why.
      }
    }, "thaw-prepare-arena");
    arena.setDaemon(true);
    arena.start();
    Thread thread = new Thread(() -> {
      GpuContext c;
      try {
        c = driver.createContext(device);
        mark(timeline, "context");
      } catch (Throwable e) {
        context.completeExceptionally(e);
        made.completeExceptionally(e);
        return;
      }
      // An image registered meanwhile is prepared in the context from here on, beside the restore resources.
      context.complete(c);
      try {
        made.complete(new PreparedContext(c, RestoreResources.create(c)));
        mark(timeline, "restore resources");
      } catch (Throwable e) {
        c.close();
        made.completeExceptionally(e);
      }
    }, "thaw-prepare-context");
    thread.setDaemon(true);
    thread.start();
    return new Prepared(device, context, made, new AtomicBoolean(), new AtomicReference<>());
  }


  /**
   * The first on-demand start on the prepared context's device takes it; one nobody took is closed with this
   * factory. Call once, before the first start.
   */
  public InProcessInstances takePrepared(Prepared prepared) {
    this.prepared = prepared;
    return this;
  }

  /**
   * The first image registered while a prepared context waits is prepared in it, on a thread of its own, as soon as
   * the context is made (beside its restore resources): its class, state and modules. Returns at once.
   */
  @Override
  public void prepare(String tag, ImageManifest manifest) {
    Prepared p = prepared;
    if (p == null || p.taken().get() || restore != Restore.ON_DEMAND || ownDriver != null) {
      return;
    }
    StartupTimeline t = timeline;
    CompletableFuture<PreparedRestore> made = new CompletableFuture<>();
    if (!p.image().compareAndSet(null, new ImageAhead(tag, manifest, made))) {
      return;
    }
    p.context().whenComplete((c, failed) -> {
      if (failed != null) {
        made.completeExceptionally(failed);
        return;
      }
      Thread thread = new Thread(() -> {
        try {
          made.complete(new OnDemandRestorer(store).prepare(RestorePlan.of(manifest), c, RestoreSource.STORE_ONLY));
          mark(t, "image prepared");
        } catch (Throwable e) {
          made.completeExceptionally(e);
        }
      }, "thaw-prepare-image");
      thread.setDaemon(true);
      thread.start();
    });
  }

  /** Tells {@code timeline} of the prepared context and of the first instance's start. */
  public InProcessInstances reportStartsTo(StartupTimeline timeline) {
    this.timeline = timeline;
    return this;
  }

  private static void mark(StartupTimeline t, String event) {
    if (t != null) {
      t.mark(event);
    }
  }

  /** The prepared context when this start may take it (its device, on demand, not taken yet), or null. */
  private PreparedContext takePrepared(int device) {
    Prepared p = prepared;
    if (p == null || p.device() != device || restore != Restore.ON_DEMAND || ownDriver != null
        || !p.taken().compareAndSet(false, true)) {
      return null;
    }
    try {
      return p.made().join();
    } catch (CompletionException e) {
      // Made on another thread: the start makes its own and fails, or not, on this one.
      return null;
    }
  }

  /** The same instances, restored {@code how}. */
  public InProcessInstances restoring(Restore how) {
    return new InProcessInstances(driver, store, ownDriver, how, poisoned);
  }

  /**
   * Every instance on a driver of its own, opened by {@code drivers} and closed with the instance: on the sim
   * device each has its own address space, as a worker process has, so instances of one image can coexist. (A
   * CUDA driver has one address space per process, so this is for the sim device.)
   */
  public static InProcessInstances isolated(GpuDriver devices, ChunkStore store, Supplier<GpuDriver> drivers) {
    return new InProcessInstances(devices, store, drivers, Restore.ON_DEMAND);
  }

  @Override
  public String name() {
    return "in-process";
  }

  @Override
  public List<DeviceInfo> devices() {
    return driver.devices();
  }

  @Override
  public boolean sharedAddressSpace() {
    return ownDriver == null;
  }

  @Override
  public String poisoned() {
    return poisoned.get();
  }

  /** Records the first sticky CUDA error in {@code failure}, if any: this process's CUDA is unusable from now on. */
  private void poisonIfSticky(Throwable failure) {
    CudaException sticky = CudaException.stickyIn(failure);
    if (sticky != null && poisoned.compareAndSet(null, "a sticky CUDA error (" + sticky.errorName()
        + ") left CUDA in this process unusable: " + sticky.getMessage())) {
      LOG.error("{}; the server reports not live until it is restarted", poisoned.get());
    }
  }

  /** @throws ServeException 503 {@code device_fault} once the process's CUDA is unusable */
  private void checkNotPoisoned() {
    String why = poisoned.get();
    if (why != null) {
      throw new ServeException(503, "device_fault", why + "; the server must be restarted");
    }
  }

  @Override
  public FunctionInstance startBlocking(String tag, ImageManifest manifest, int device) {
    checkNotPoisoned();
    List<AutoCloseable> owned = new ArrayList<>();
    try {
      long t = System.nanoTime();
      PreparedContext ready = takePrepared(device);
      if (ready != null) {
        owned.add(ready.context());
        owned.add(ready.resources());
        PreparedRestore image = takeImage(tag, manifest);
        double acquireMs = (System.nanoTime() - t) / 1e6;
        if (image != null) {
          return onDemand(manifest, device, () -> new OnDemandRestorer(store).restore(image, RestoreSource.STORE_ONLY,
              ready.resources(), new OnDemandOptions()), acquireMs, owned);
        }
        return onDemand(tag, manifest, device, ready.context(), ready.resources(), acquireMs, owned);
      }
      GpuDriver own = ownDriver == null ? null : ownDriver.get();
      if (own != null) {
        owned.add(own);
      }
      GpuContext context = (own == null ? driver : own).createContext(device);
      owned.add(context);
      if (restore == Restore.FULL) {
        double acquireMs = (System.nanoTime() - t) / 1e6;
        RestoredFunction<?> f = new ImageRestorer(store).restore(tag, context);
        owned.add(f);
        RestoreTimings r = f.timings();
        StartPhases phases = new StartPhases(acquireMs, r.openMillis() + r.mapMillis() + r.modulesMillis(),
            r.copyMillis() + r.stateMillis(), r.bytes(), "store");
        return new Instance(this, f, null, phases, device, owned);
      }
      RestoreResources resources = RestoreResources.create(context);
      owned.add(resources);
      double acquireMs = (System.nanoTime() - t) / 1e6;
      return onDemand(tag, manifest, device, context, resources, acquireMs, owned);
    } catch (RuntimeException | Error e) {
      poisonIfSticky(e);
      closeAll(owned, e);
      throw e;
    }
  }

  private FunctionInstance onDemand(String tag, ImageManifest manifest, int device, GpuContext context,
      RestoreResources resources, double acquireMs, List<AutoCloseable> owned) {
    return onDemand(manifest, device, () -> new OnDemandRestorer(store).restore(manifest, context,
        RestoreSource.STORE_ONLY, resources, new OnDemandOptions()), acquireMs, owned);
  }

  /**
   * The image prepared ahead in the prepared context when it is this start's ({@code tag}, the very manifest the
   * registration read) and its preparation succeeded; else null (a failed one is closed).
   */
  private PreparedRestore takeImage(String tag, ImageManifest manifest) {
    ImageAhead ahead = prepared.image().getAndSet(null);
    if (ahead == null) {
      return null;
    }
    PreparedRestore r;
    try {
      r = ahead.restore().join();
    } catch (CompletionException e) {
      return null;
    }
    if (!ahead.tag().equals(tag) || ahead.manifest() != manifest) {
      r.close();
      return null;
    }
    return r;
  }

  private FunctionInstance onDemand(ImageManifest manifest, int device, Supplier<OnDemandRestore> restoring,
      double acquireMs, List<AutoCloseable> owned) {
    long restoreStart = System.nanoTime();
    OnDemandRestore r = restoring.get();
    owned.add(r);
    // The host waits for no byte: the first request's kernels wait on the device for theirs, inside its invoke.
    StartPhases phases = new StartPhases(acquireMs, r.timings().readyMillis(), 0, manifest.totalBytes(), "store");
    StartupTimeline t = timeline;
    if (t != null) {
      Map<String, Double> p = new LinkedHashMap<>();
      p.put("context", acquireMs);
      p.put("restore", (System.nanoTime() - restoreStart) / 1e6);
      t.instanceStarted(null, p);
    }
    return new Instance(this, r.function(), new OnDemand(r, restoreStart), phases, device, owned);
  }

  @Override
  public void close() {
    // Contexts belong to their instances; the driver belongs to whoever opened it. A prepared context nobody took
    // is this factory's.
    Prepared p = prepared;
    if (p != null) {
      p.closeUntaken();
    }
  }

  private static void closeAll(List<AutoCloseable> owned, Throwable failure) {
    for (int i = owned.size() - 1; i >= 0; i--) {
      try {
        owned.get(i).close();
      } catch (Exception e) {
        if (failure != null) {
          failure.addSuppressed(e);
        }
      }
    }
  }

  /** An on-demand restore and when it began, for its timeline. */
  private record OnDemand(OnDemandRestore restore, long startNanos) {}

  private static final class Instance implements FunctionInstance {
    private final InProcessInstances factory;
    private final RestoredFunction<?> function;
    private final OnDemand onDemand;
    private final StartPhases phases;
    private final int device;
    private final List<AutoCloseable> owned;
    private final CompletableFuture<JsonNode> trace = new CompletableFuture<>();
    private boolean closed;
    private boolean invoked;
    private volatile boolean healthy = true;
    /** The function's engine when it serves several requests at once (made at the first), else null. */
    private FunctionEngine engine;
    /** Requests in the engine and not yet answered; guarded by this. */
    private int inEngine;

    Instance(InProcessInstances factory, RestoredFunction<?> function, OnDemand onDemand, StartPhases phases,
        int device, List<AutoCloseable> owned) {
      this.factory = factory;
      this.function = function;
      this.onDemand = onDemand;
      this.phases = phases;
      this.device = device;
      this.owned = owned;
      if (onDemand == null) {
        trace.complete(null);
      }
    }

    @Override
    public StartPhases startPhases() {
      return phases;
    }

    @Override
    public int device() {
      return device;
    }

    @Override
    public FunctionResponse invokeBlocking(FunctionRequest request) throws Exception {
      return invokeBlocking(request, ResponseStream.unstreamed());
    }

    private FunctionResponse invokeBlocking(FunctionRequest request, ResponseStream stream) throws Exception {
      factory.checkNotPoisoned();
      try {
        if (onDemand != null && invoked) {
          // Between requests (an instance serves one at a time, and the last one's invoke has returned): the read-only
          // slabs are protected here once resident, never under a request's kernels. A no-op after the first time.
          onDemand.restore().protectReadOnlySlabs();
        }
        return function.invoke(request, stream);
      } catch (InvalidRequestException e) {
        throw e;
      } catch (Exception | Error e) {
        // The function promises to leave the device fit after refusing a request, not after anything else: a
        // fault may have poisoned the context, so this instance serves no more.
        healthy = false;
        factory.poisonIfSticky(e);
        throw e;
      } finally {
        if (onDemand != null && !invoked) {
          invoked = true;
          // The timeline can be written once every copy has landed and the first request's work is done.
          onDemand.restore().resident().whenComplete((v, e) -> writeTrace());
        }
      }
    }

    /** The function batches: requests go to its engine, and this returns at once. */
    @Override
    public boolean invokesAsync() {
      return function.concurrency() > 1;
    }

    @Override
    public CompletableFuture<Invoked> invoke(FunctionRequest request, ResponseStream stream) {
      if (!invokesAsync()) {
        long t = System.nanoTime();
        try {
          return CompletableFuture.completedFuture(new Invoked(invokeBlocking(request, stream),
              (System.nanoTime() - t) / 1e6));
        } catch (Exception | Error e) {
          return CompletableFuture.failedFuture(e);
        }
      }
      long t = System.nanoTime();
      CompletableFuture<FunctionResponse> served;
      try {
        served = submit(request, stream);
      } catch (RuntimeException | Error e) {
        return CompletableFuture.failedFuture(e);
      }
      return served.handle((r, e) -> {
        synchronized (this) {
          inEngine--;
        }
        if (e == null) {
          return new Invoked(r, (System.nanoTime() - t) / 1e6);
        }
        Throwable c = e instanceof CompletionException && e.getCause() != null ? e.getCause() : e;
        if (!(c instanceof InvalidRequestException)) {
          healthy = false;
          factory.poisonIfSticky(c);
        }
        throw c instanceof RuntimeException x ? x : new CompletionException(c);
      });
    }

    /**
     * Hands the request to the engine. With no request in it the engine touches nothing on the device, so the read-only
     * slabs are protected then, once resident, never under a step.
     */
    private synchronized CompletableFuture<FunctionResponse> submit(FunctionRequest request, ResponseStream stream) {
      factory.checkNotPoisoned();
      if (closed) {
        throw new IllegalStateException("the instance is closed");
      }
      if (onDemand != null && inEngine == 0 && invoked) {
        onDemand.restore().protectReadOnlySlabs();
      }
      if (engine == null) {
        engine = function.engine();
      }
      if (onDemand != null && !invoked) {
        invoked = true;
        onDemand.restore().resident().whenComplete((v, e) -> writeTrace());
      }
      CompletableFuture<FunctionResponse> served = engine.submit(request, stream);
      inEngine++;
      return served;
    }

    private synchronized void writeTrace() {
      if (closed) {
        trace.complete(null);
        return;
      }
      try {
        trace.complete(onDemand.restore().trace().chromeTrace(onDemand.startNanos(), ColdStartTraces.MAX_SPANS));
      } catch (RuntimeException e) {
        trace.complete(null);
      }
    }

    @Override
    public CompletableFuture<RestoreTimeline> restoreTimeline() {
      return trace.thenApply(t -> t == null ? null : new RestoreTimeline(t, onDemand.startNanos()));
    }

    @Override
    public boolean healthy() {
      return healthy && !closed && factory.poisoned() == null;
    }

    @Override
    public String describe() {
      return "in-process on device " + device + (onDemand != null ? ", restored on demand" : ", fully restored");
    }

    @Override
    public void close() {
      FunctionEngine e;
      synchronized (this) {
        if (closed) {
          return;
        }
        closed = true;
        e = engine;
      }
      // The engine's thread stops first: nothing may run on the device while the restore and the session go.
      if (e != null) {
        e.close();
      }
      synchronized (this) {
        closeAll(owned, null);
        trace.complete(null);
      }
    }
  }
}
