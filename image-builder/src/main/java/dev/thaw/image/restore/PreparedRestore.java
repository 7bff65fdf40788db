package dev.thaw.image.restore;

import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuModule;
import java.util.Map;

/**
 * The part of an image's restore that depends on neither its bytes nor the request: the parsed manifest and its
 * {@link RestorePlan}, the function's class loaded and instantiated, its host state read, and its modules loaded
 * into the context. A pooled worker makes one for each registered image while it is idle
 * ({@link OnDemandRestorer#prepare}), so that becoming one of them is only mapping memory and starting the copy
 * stream ({@link OnDemandRestorer#restore(PreparedRestore, RestoreSource, RestoreResources, OnDemandOptions)}).
 *
 * <p>Used by at most one restore: the function instance, its state and the modules pass to it. One never used is
 * closed, which unloads its modules.
 */
public final class PreparedRestore implements AutoCloseable {

  private final RestorePlan plan;
  private final GpuContext context;
  private final ThawFunction<?> function;
  private final Object state;
  private final Map<String, GpuModule> modules;
  private final double millis;
  private boolean taken;

  PreparedRestore(RestorePlan plan, GpuContext context, ThawFunction<?> function, Object state,
      Map<String, GpuModule> modules, double millis) {
    this.plan = plan;
    this.context = context;
    this.function = function;
    this.state = state;
    this.modules = Map.copyOf(modules);
    this.millis = millis;
  }

  public RestorePlan plan() {
    return plan;
  }

  public GpuContext context() {
    return context;
  }

  /** How long preparing took (parse excluded): loading the class, reading the state, loading the modules. */
  public double millis() {
    return millis;
  }

  /** True once a restore took it (or it was closed): it cannot be used again. */
  public synchronized boolean taken() {
    return taken;
  }

  synchronized void take() {
    if (taken) {
      throw new IllegalStateException("this prepared restore of " + plan.manifest().function().className()
          + " was used already");
    }
    taken = true;
  }

  ThawFunction<?> function() {
    return function;
  }

  Object state() {
    return state;
  }

  Map<String, GpuModule> modules() {
    return modules;
  }

  /** Unloads its modules unless a restore took them. Idempotent. */
  @Override
  public void close() {
    synchronized (this) {
      if (taken) {
        return;
      }
      taken = true;
    }
    modules.values().forEach(GpuModule::close);
  }
}
