package dev.thaw.image.restore;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.function.FunctionLoader;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.HostStates;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.AddressUnavailableException;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuModule;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * On-demand restore ({@code docs/design/on-demand-restore.md}): makes a function invocable as soon as its
 * allocations are mapped and its modules loaded, and streams the image's bytes in behind it, in the profile's
 * first-access order, while a {@link ResidencyGate} makes each launch wait on the device for what it may touch.
 *
 * <p>Bytes come from the {@link RestoreSource}'s tiers where it has them (already resident allocations are skipped,
 * host-cached chunks are copied straight from where they lie) and from the store otherwise (read, verified, staged).
 * Nothing is verified twice and nothing reaches the device unverified. The restore's long-lived resources (stream,
 * events, pinned staging, threads) are the caller's, in {@link RestoreResources}.
 */
public final class OnDemandRestorer {

  private final ChunkStore store;

  public OnDemandRestorer(ChunkStore store) {
    this.store = store;
  }

  /** {@link #restore(RestorePlan, GpuContext, RestoreSource, RestoreResources, OnDemandOptions)} of a new plan. */
  public OnDemandRestore restore(ImageManifest manifest, GpuContext context, RestoreSource source,
      RestoreResources resources, OnDemandOptions options) {
    return restore(RestorePlan.of(manifest), context, source, resources, options);
  }

  /**
   * Maps {@code plan}'s image into {@code context}, loads its modules, starts streaming its bytes and returns with
   * the function invocable. The context must be {@code resources}'s; the image must be built for a device of this
   * architecture or carry PTX (modules are JIT-compiled otherwise).
   *
   * @throws ImageRestoreException if the function class cannot be loaded, an address is taken, or the state does
   *     not read
   * @throws CorruptChunkException naming a cubin whose bytes do not match its digest
   * @throws IllegalStateException if {@code resources} are lent to a restore not closed yet
   */
  public OnDemandRestore restore(RestorePlan plan, GpuContext context, RestoreSource source,
      RestoreResources resources, OnDemandOptions options) {
    if (resources.context() != context) {
      throw new IllegalArgumentException("the restore resources belong to another context");
    }
    checkHelpers(options, context);
    long start = System.nanoTime();
    return restore(plan, context, source, resources, options, load(plan.manifest()), null, Map.of(), start);
  }

  /**
   * Does ahead of a restore what depends on neither the image's bytes nor a request: loads the function's class
   * and instantiates it, reads its host state, and loads its modules into {@code context} (each cubin from
   * {@code source}'s host tier when it has it, checked against its digest there — the chunk is not pinned yet —
   * else read from the store and verified). A restore of the result then maps memory and starts copying, no more.
   *
   * @throws ImageRestoreException if the class cannot be loaded or the state does not read
   */
  public PreparedRestore prepare(RestorePlan plan, GpuContext context, RestoreSource source) {
    long start = System.nanoTime();
    ImageManifest manifest = plan.manifest();
    ThawFunction<?> function = load(manifest);
    Object state = readState(function, manifest);
    Map<String, GpuModule> modules = new HashMap<>();
    try (RestoreSource.Lease lease = source.lease(manifest)) {
      Map<String, byte[]> cubins = cubins(manifest, context, lease, true);
      for (ImageManifest.Module m : manifest.modules()) {
        byte[] cubin = cubins.get(m.name());
        GpuModule module = cubin != null ? context.loadCubin(cubin) : context.loadPtx(m.ptx());
        modules.put(m.name(), module);
        // With lazy loading (the driver's default) a kernel is loaded onto the device when it is first looked
        // up: every one now, so that no launch of the cold start pays for it. The module keeps the handles.
        m.kernels().forEach(k -> module.kernel(k.name()));
      }
    } catch (RuntimeException | Error e) {
      modules.values().forEach(GpuModule::close);
      throw e;
    }
    return new PreparedRestore(plan, context, function, state, modules, (System.nanoTime() - start) / 1e6);
  }

  /**
   * Restores a {@link #prepare prepared} image into the context it was prepared in: maps its allocations, starts
   * streaming its bytes and returns with the function invocable. Its function, state and modules pass to the
   * restore.
   *
   * @throws IllegalStateException if {@code prepared} was used already, or {@code resources} are lent
   */
  public OnDemandRestore restore(PreparedRestore prepared, RestoreSource source, RestoreResources resources,
      OnDemandOptions options) {
    if (resources.context() != prepared.context()) {
      throw new IllegalArgumentException("the restore resources belong to another context than the prepared image");
    }
    checkHelpers(options, prepared.context());
    long start = System.nanoTime();
    prepared.take();
    try {
      return restore(prepared.plan(), prepared.context(), source, resources, options, prepared.function(),
          prepared.state(), prepared.modules(), start);
    } catch (RuntimeException | Error e) {
      // Unloaded with the session where the rebuild got that far; closing a module twice is harmless.
      prepared.modules().values().forEach(GpuModule::close);
      throw e;
    }
  }

  private static void checkHelpers(OnDemandOptions options, GpuContext context) {
    for (HelperLink link : options.helpers()) {
      if (link.target() != context) {
        throw new IllegalArgumentException(link + " helps restores onto another context than this one");
      }
    }
  }

  private static ThawFunction<?> load(ImageManifest manifest) {
    try {
      return FunctionLoader.load(manifest.function().className());
    } catch (IllegalArgumentException e) {
      throw new ImageRestoreException(manifest.function().className() + ": " + e.getMessage(), e);
    }
  }

  private static Object readState(ThawFunction<?> function, ImageManifest manifest) {
    try {
      return HostStates.read(manifest.hostState(), function.stateType());
    } catch (IllegalArgumentException e) {
      throw new ImageRestoreException(function.getClass().getName() + ": " + e.getMessage(), e);
    }
  }

  /**
   * @param state the host state read ahead, or null to read it now
   * @param loaded modules loaded ahead (taken over by the session), or none
   */
  private OnDemandRestore restore(RestorePlan plan, GpuContext context, RestoreSource source,
      RestoreResources resources, OnDemandOptions options, ThawFunction<?> function, Object state,
      Map<String, GpuModule> loaded, long start) {
    ImageManifest manifest = plan.manifest();
    resources.borrow();
    RestoreSource.Lease lease = null;
    FunctionSession session = null;
    try {
      RestoreTrace trace = new RestoreTrace(resources, options.trace(), start);
      lease = source.lease(manifest);
      long t = System.nanoTime();
      // Modules loaded ahead need no cubin: their records keep an empty one (a rebuilt session is never recorded).
      Map<String, byte[]> cubins = loaded.isEmpty() ? cubins(manifest, context, lease, false) : Map.of();
      long cubinNanos = System.nanoTime() - t;
      try {
        // Read-only allocations in slabs of their own in every case: the restore write-protects them once filled.
        session = FunctionSession.rebuild(context, manifest.sessionTable(cubins), manifest.readOnlyAllocations(),
            options.slabSource() == null ? FunctionSession.SlabSource.FRESH : options.slabSource(), loaded);
      } catch (AddressUnavailableException e) {
        throw new ImageRestoreException("image of " + manifest.function().className() + " needs its device "
            + "addresses, and one is taken in this process: " + e.getMessage(), e);
      }
      if (options.slabSource() != null) {
        // Which allocations the slab source made resident is known only now: ask the source again.
        RestoreSource.Lease forCubins = lease;
        lease = null;
        forCubins.close();
        lease = source.lease(manifest);
      }
      FunctionSession.RebuildTimings rebuilt = session.rebuildTimings();
      Residency residency = new Residency(plan, resources, store, lease, options, new SlabProtection(session));
      trace.attach(residency);
      ResidencyGate gate = new ResidencyGate(session, plan, residency, resources.uploadArena(), trace);
      ResidencyValidator validator = options.validate() ? new ResidencyValidator(session, gate) : null;
      if (validator != null) {
        session.setLaunchInterceptor(validator);
      } else {
        session.setLaunchInterceptor(gate);
      }
      residency.start();
      long mapped = System.nanoTime();
      trace.span("load modules, map allocations", t, mapped);
      OnDemandRestore restore = withState(function, state, plan, session, residency, gate, validator, trace,
          resources, cubinNanos + rebuilt.moduleNanos(), rebuilt.mapNanos(), start);
      trace.span("read host state", mapped, System.nanoTime());
      return restore;
    } catch (RuntimeException | Error e) {
      if (session != null) {
        try {
          session.close();
        } catch (RuntimeException suppressed) {
          e.addSuppressed(suppressed);
        }
      }
      if (lease != null) {
        lease.close();
      }
      resources.giveBack();
      throw e;
    }
  }

  private <S> OnDemandRestore withState(ThawFunction<S> function, Object stateReadAhead, RestorePlan plan,
      FunctionSession session, Residency residency, ResidencyGate gate, ResidencyValidator validator,
      RestoreTrace trace, RestoreResources resources, long moduleNanos, long mapNanos, long start) {
    long t = System.nanoTime();
    S state;
    try {
      state = stateReadAhead != null ? function.stateType().cast(stateReadAhead)
          : HostStates.read(plan.manifest().hostState(), function.stateType());
    } catch (IllegalArgumentException | ClassCastException e) {
      residency.stop();
      throw new ImageRestoreException(function.getClass().getName() + ": " + e.getMessage(), e);
    }
    long end = System.nanoTime();
    OnDemandRestore.Timings timings = new OnDemandRestore.Timings(moduleNanos / 1e6, mapNanos / 1e6,
        (end - t) / 1e6, (end - start) / 1e6);
    RestoreTimings full = new RestoreTimings(0, mapNanos / 1e6, moduleNanos / 1e6, Double.NaN, (end - t) / 1e6,
        (end - start) / 1e6, plan.totalBytes());
    RestoredFunction<S> f = new RestoredFunction<>(plan.manifest().function().className(), plan.manifest(), function,
        session, state, full, List.of());
    return new OnDemandRestore(f, residency, gate, validator, trace, resources, timings);
  }

  /**
   * Each module's cubin, from the host tier when it has it (verified there; checked again when {@code recheck}: a
   * chunk read without a pin may have been evicted meanwhile), else read from the store and verified.
   */
  private Map<String, byte[]> cubins(ImageManifest manifest, GpuContext context, RestoreSource.Lease lease,
      boolean recheck) {
    Map<String, byte[]> cubins = new HashMap<>();
    if (!context.device().smArch().equals(manifest.device().smArch())) {
      return cubins;
    }
    for (ImageManifest.Module m : manifest.modules()) {
      byte[] bytes = new byte[m.cubin().length()];
      RestoreSource.HostChunk h = lease.find(m.cubin().digest());
      if (h != null) {
        h.buffer().slice(h.offset(), bytes.length).get(bytes);
      }
      if (h != null && recheck && !Digest.of(ByteBuffer.wrap(bytes)).equals(m.cubin().digest())) {
        h = null;
      }
      if (h == null) {
        ByteBuffer b = ByteBuffer.wrap(bytes);
        VerifiedChunks.read(store, m.cubin().digest(), b, "the cubin of module '" + m.name() + "'");
      }
      cubins.put(m.name(), bytes);
    }
    return cubins;
  }
}
