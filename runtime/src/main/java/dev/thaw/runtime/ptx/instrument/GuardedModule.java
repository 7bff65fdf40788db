package dev.thaw.runtime.ptx.instrument;

import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.ParamLayout;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A loaded instrumented module seen as the plain one: its kernels take the original parameters, so code
 * written against a plain module (a function's kernel wrapper) runs validated without change. Two modes:
 * <ul>
 *   <li>{@link #perLaunch}: each launch goes through a {@link ValidatingLauncher} with the ranges a
 *       {@link Policy} allows for those arguments, and its violations go to {@link Policy#report}.
 *       Synchronous per launch.
 *   <li>{@link #withGuard}: every launch passes the same {@link DeviceGuard}, asynchronously, as a plain
 *       launch would run; the caller reads {@link DeviceGuard#read()} after synchronizing.
 * </ul>
 * A view does not own the instrumented module: closing it leaves the module loaded.
 */
public final class GuardedModule implements GpuModule {

  /** What a launch may touch, and where its violations go. */
  public interface Policy {
    GuardTable allowed(Kernel kernel, KernelArgs args);

    void report(Kernel kernel, KernelArgs args, ViolationReport report);
  }

  private final GpuModule instrumented;
  private final ValidatingLauncher launcher;
  private final Policy policy;
  private final DeviceGuard guard;
  private final Map<String, Kernel> kernels = new ConcurrentHashMap<>();

  private GuardedModule(GpuModule instrumented, ValidatingLauncher launcher, Policy policy, DeviceGuard guard) {
    this.instrumented = instrumented;
    this.launcher = launcher;
    this.policy = policy;
    this.guard = guard;
  }

  /** {@code instrumented}: the module loaded from {@link InstrumentedModule#ptx()}; closed with this one. */
  public static GuardedModule perLaunch(GpuModule instrumented, ValidatingLauncher launcher, Policy policy) {
    return new GuardedModule(instrumented, launcher, policy, null);
  }

  /** Every launch passes {@code guard}'s address, without synchronizing. */
  public static GuardedModule withGuard(GpuModule instrumented, DeviceGuard guard) {
    return new GuardedModule(instrumented, null, null, guard);
  }

  @Override
  public Optional<String> ptx() {
    return instrumented.ptx();
  }

  @Override
  public byte[] cubin() {
    return instrumented.cubin();
  }

  @Override
  public String jitLog() {
    return instrumented.jitLog();
  }

  @Override
  public List<String> kernelNames() {
    return instrumented.kernelNames();
  }

  @Override
  public Kernel kernel(String name) {
    return kernels.computeIfAbsent(name, n -> new GuardedKernel(instrumented.kernel(n)));
  }

  @Override
  public void close() {
    // A view: several may share one instrumented module, which belongs to whoever loaded it (and is unloaded
    // with its context at the latest). Closing a view must not pull the module from under the others.
  }

  private final class GuardedKernel implements Kernel {
    private final Kernel target;
    private final ParamLayout params;
    private final ThreadLocal<KernelArgs> slab;

    GuardedKernel(Kernel target) {
      this.target = target;
      this.params = ValidatingLauncher.originalLayout(target.params(), target.name());
      this.slab = ThreadLocal.withInitial(target::newArgs);
    }

    @Override
    public String name() {
      return target.name();
    }

    @Override
    public GpuModule module() {
      return GuardedModule.this;
    }

    @Override
    public ParamLayout params() {
      return params;
    }

    @Override
    public void setMaxDynamicSharedMemory(int bytes) {
      target.setMaxDynamicSharedMemory(bytes);
    }

    @Override
    public void launch(Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream, KernelArgs args) {
      if (guard != null) {
        ValidatingLauncher.checkLayouts(args.layout(), target.params(), target.name());
        args.checkComplete();
        KernelArgs full = slab.get();
        ValidatingLauncher.copy(args, full);
        full.set(params.count(), guard.address());
        target.launch(grid, block, sharedMemBytes, stream, full);
        return;
      }
      GuardTable allowed = policy.allowed(this, args);
      ViolationReport r = launcher.launch(target, grid, block, sharedMemBytes, stream, args, allowed);
      policy.report(this, args, r);
    }

    @Override
    public void launch(Dim3 grid, Dim3 block, GpuStream stream, Object... args) {
      launch(grid, block, 0, stream, newArgs().setAll(args));
    }
  }
}
