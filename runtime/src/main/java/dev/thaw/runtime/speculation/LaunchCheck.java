package dev.thaw.runtime.speculation;

import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.gpu.sim.AccessLog;
import java.util.List;

/**
 * One validated launch on the sim device: what was speculated, what the launch touched, where they disagree.
 *
 * @param launch sequence number in its validator, in the order the launches were made
 * @param kernel the kernel
 * @param speculated the speculated set
 * @param reads the exact bytes read
 * @param writes the exact bytes written
 * @param violations accesses outside the set; empty when the speculation held
 * @param fault the launch's fault message, or null when it completed
 */
public record LaunchCheck(long launch, KernelRef kernel, AccessSet speculated, AccessLog reads, AccessLog writes,
    List<Violation> violations, String fault) {

  /** True when every access lay inside the speculated set, with the speculated kind, and the launch completed. */
  public boolean exact() {
    return violations.isEmpty() && fault == null;
  }
}
