package dev.thaw.examples.function;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.ptx.instrument.GuardTable;
import dev.thaw.runtime.ptx.instrument.GuardedModule;
import dev.thaw.runtime.ptx.instrument.InstrumentedModule;
import dev.thaw.runtime.ptx.instrument.ValidatingLauncher;
import dev.thaw.runtime.ptx.instrument.ViolationReport;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Supplier;

/**
 * An instrumented kernel module whose every launch is validated with all of a test device's buffers allowed (the
 * launch's real arguments), for the models' instrumented GPU tests: it counts launches and keeps each report that
 * was not clean, naming the kernel, the first violations and their PTX sites.
 */
public final class GuardedLaunches implements AutoCloseable {

  private final InstrumentedModule instrumented;
  private final Supplier<List<DeviceBuffer>> buffers;
  private final List<String> violations = new ArrayList<>();
  private ValidatingLauncher launcher;
  private GpuModule module;
  private GuardedModule perLaunch;
  private int launches;

  /** {@code buffers}: what the guarded device has uploaded, read at each launch. */
  public GuardedLaunches(InstrumentedModule instrumented, Supplier<List<DeviceBuffer>> buffers) {
    this.instrumented = instrumented;
    this.buffers = buffers;
  }

  /** Loads the instrumented PTX in {@code context}; the module to make the model's kernels from. */
  public GuardedModule load(GpuContext context) {
    launcher = new ValidatingLauncher(context);
    module = context.loadPtx(instrumented.ptx());
    perLaunch = GuardedModule.perLaunch(module, launcher, new GuardedModule.Policy() {
      @Override
      public GuardTable allowed(Kernel kernel, KernelArgs args) {
        return allBuffers();
      }

      @Override
      public void report(Kernel kernel, KernelArgs args, ViolationReport report) {
        launches++;
        if (!report.clean()) {
          violations.add(kernel.name() + ": " + report.total() + " violations, first "
              + report.recorded().subList(0, Math.min(5, report.recorded().size())) + " at sites "
              + report.recorded().stream().limit(5).map(v -> instrumented.site(v.site()).toString()).toList());
        }
      }
    });
    return perLaunch;
  }

  /** The instrumented module itself, unguarded, for a guard of the caller's own. */
  public GpuModule module() {
    return module;
  }

  /** Every buffer the case uploaded, read-write: the launch's real arguments. */
  public GuardTable allBuffers() {
    GuardTable.Builder b = GuardTable.builder();
    for (DeviceBuffer buffer : buffers.get()) {
      b.allow(buffer.address(), buffer.size(), GuardTable.READ_WRITE);
    }
    return b.build();
  }

  /**
   * Runs {@code run} (a case on the guarded device) and asserts that it launched through the instrumented module and
   * that no launch reported a violation; gives what it returned.
   */
  public <T> T assertClean(String caseName, Supplier<T> run) {
    violations.clear();
    int before = launches;
    T out = run.get();
    assertTrue(launches > before, caseName + ": no launch went through the instrumented module");
    assertEquals(List.of(), violations, caseName + ": violations with every argument allowed");
    return out;
  }

  @Override
  public void close() {
    launcher.close();
    perLaunch.close();
  }
}
