package dev.thaw.runtime.speculation;

import dev.thaw.runtime.function.KernelRef;
import java.util.List;

/**
 * One launch profiled on a GPU: what was speculated and what the instrumented kernel's guard reported.
 *
 * @param launch sequence number in its profiler, in launch order, from 0
 * @param kernel the kernel
 * @param speculated the speculated set: the guard's allowed ranges; null when speculation itself failed
 * @param violationCount violating accesses the guard counted, recorded or not
 * @param violations the recorded ones, merged ({@link SiteViolation}), by address
 * @param unchecked why the launch ran uninstrumented (the module could not be instrumented, ...), or null
 * @param fault the launch's failure, or null when it completed
 */
public record GpuLaunchCheck(long launch, KernelRef kernel, AccessSet speculated, long violationCount,
    List<SiteViolation> violations, String unchecked, String fault) {

  public GpuLaunchCheck {
    violations = List.copyOf(violations);
  }

  /** True when the launch ran instrumented, completed and the guard counted no violation. */
  public boolean exact() {
    return violationCount == 0 && unchecked == null && fault == null;
  }
}
