package dev.thaw.image.restore;

import dev.thaw.runtime.function.CopyInterceptor;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.function.LaunchRedirect;
import dev.thaw.runtime.function.ModuleRecord;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.ptx.instrument.GuardTable;
import dev.thaw.runtime.ptx.instrument.PtxInstrumenter;
import dev.thaw.runtime.ptx.instrument.ValidatingLauncher;
import dev.thaw.runtime.ptx.instrument.GuardViolation;
import dev.thaw.runtime.ptx.instrument.ViolationReport;
import dev.thaw.runtime.speculation.AllocationIndex;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The validating mode of on-demand restore on a GPU ({@link OnDemandOptions#setValidate(boolean)}): every launch passes
 * the {@link ResidencyGate} first, then runs as its PTX-instrumented twin with "resident, or waited for by this
 * stream" as the allowed set, so any load or store of a byte the gate did not make safe is reported with its address.
 * A launch of a module that cannot be instrumented runs plain and is counted unchecked.
 *
 * <p>For debugging and tests, never for serving: each instrumented launch synchronizes its stream before and after
 * (the host blocks), so it shows whether the gating is right, not how fast it is.
 */
final class ResidencyValidator implements LaunchRedirect, CopyInterceptor {

  /** At most this many violations are described; all are counted. */
  static final int MAX_DESCRIBED = 20;

  private final FunctionSession session;
  private final ResidencyGate gate;
  private final ValidatingLauncher launcher;
  private final Map<String, GpuModule> instrumented = new HashMap<>();
  private final Map<String, String> failures = new HashMap<>();
  private final Map<KernelRef, Kernel> kernels = new HashMap<>();
  private final List<String> violations = new ArrayList<>();
  private long violationCount;
  private long checked;
  private long unchecked;

  ResidencyValidator(FunctionSession session, ResidencyGate gate) {
    this.session = session;
    this.gate = gate;
    this.launcher = new ValidatingLauncher(session.context());
  }

  @Override
  public void beforeLaunch(KernelRef kernel, Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream,
      KernelArgs args) {
    gate.beforeLaunch(kernel, grid, block, sharedMemBytes, stream, args);
  }

  @Override
  public boolean launchInstead(KernelRef kernel, Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream,
      KernelArgs args) {
    Kernel twin = twin(kernel);
    if (twin == null) {
      unchecked++;
      return false;
    }
    AllocationIndex index = gate.index();
    GuardTable.Builder allowed = GuardTable.builder();
    for (int p = 0; p < index.size(); p++) {
      if (gate.allowed(p, stream)) {
        allowed.allow(index.start(p), index.end(p) - index.start(p), GuardTable.READ_WRITE);
      }
    }
    ViolationReport report = launcher.launch(twin, grid, block, sharedMemBytes, stream, args, allowed.build());
    checked++;
    violationCount += report.total();
    for (GuardViolation v : report.recorded()) {
      if (violations.size() == MAX_DESCRIBED) {
        break;
      }
      int p = index.find(v.address());
      violations.add(kernel + " touched " + v.size() + " bytes at 0x" + Long.toHexString(v.address()) + " of '"
          + (p < 0 ? "?" : index.name(p)) + "' (" + v.kind() + ") before it was resident or waited for");
    }
    return true;
  }

  private Kernel twin(KernelRef ref) {
    Kernel k = kernels.get(ref);
    if (k != null || failures.containsKey(ref.module())) {
      return k;
    }
    GpuModule m = instrumented.get(ref.module());
    if (m == null) {
      ModuleRecord record = session.moduleRecord(ref.module());
      try {
        m = session.context().loadPtx(PtxInstrumenter.instrument(record.ptx()).ptx());
      } catch (RuntimeException e) {
        failures.put(ref.module(), e.getMessage());
        return null;
      }
      instrumented.put(ref.module(), m);
    }
    k = m.kernel(ref.entry());
    kernels.put(ref, k);
    return k;
  }

  @Override
  public void beforeDeviceAccess(long address, long bytes, GpuStream stream) {
    gate.beforeDeviceAccess(address, bytes, stream);
  }

  @Override
  public boolean uploadInstead(long dstDevice, ByteBuffer src, GpuStream stream) {
    return gate.uploadInstead(dstDevice, src, stream);
  }

  /** Launches checked, launches not checked (their module could not be instrumented), violating accesses. */
  long[] counts() {
    return new long[] {checked, unchecked, violationCount};
  }

  List<String> violations() {
    return List.copyOf(violations);
  }

  void close() {
    launcher.close();
    instrumented.values().forEach(GpuModule::close);
  }
}
