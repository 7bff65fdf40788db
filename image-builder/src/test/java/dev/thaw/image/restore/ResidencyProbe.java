package dev.thaw.image.restore;

import dev.thaw.image.ImageManifest;
import dev.thaw.runtime.function.CopyInterceptor;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.sim.AddressRange;
import dev.thaw.runtime.gpu.sim.SimContext;
import dev.thaw.runtime.gpu.sim.SimLaunchRecord;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Consumer;

/**
 * Checks, on the sim device, that no launch of a restored session read or wrote a byte before it was resident: the
 * exact bytes each launch touched (the sim's launch records) against the residency timeline (the event recorded
 * after each allocation's copies), with the launch's start taken from a timing event recorded on its stream right
 * before it, after every wait the gate queued. Installed in front of the session's interceptor (the gate, or nothing
 * to see what an ungated restore does).
 */
public final class ResidencyProbe implements CopyInterceptor, AutoCloseable {

  private final FunctionSession session;
  private final SimContext sim;
  private final CopyInterceptor gate;
  private final List<GpuEvent> starts = new ArrayList<>();
  private final List<String> kernels = new ArrayList<>();
  private final List<SimLaunchRecord> records = new CopyOnWriteArrayList<>();
  private final Consumer<SimLaunchRecord> listener = records::add;

  /** @param gated keep the session's gate in front; false removes it */
  ResidencyProbe(FunctionSession session, boolean gated) {
    this.session = session;
    this.sim = (SimContext) session.context();
    this.gate = gated ? (CopyInterceptor) session.launchInterceptor() : null;
    sim.addLaunchListener(listener);
    session.setLaunchInterceptor(this);
  }

  @Override
  public void beforeLaunch(KernelRef kernel, Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream,
      KernelArgs args) {
    if (gate != null) {
      gate.beforeLaunch(kernel, grid, block, sharedMemBytes, stream, args);
    }
    GpuEvent e = session.context().createEvent(true);
    e.record(stream);
    starts.add(e);
    kernels.add(kernel.entry());
  }

  @Override
  public void beforeDeviceAccess(long address, long bytes, GpuStream stream) {
    if (gate != null) {
      gate.beforeDeviceAccess(address, bytes, stream);
    }
  }

  @Override
  public boolean uploadInstead(long dstDevice, ByteBuffer src, GpuStream stream) {
    return gate != null && gate.uploadInstead(dstDevice, src, stream);
  }

  int launches() {
    return starts.size();
  }

  /**
   * Every byte a launch touched before the allocation holding it was resident, as readable lines; empty when the
   * gating held. Call once the restore is resident and the function's work done.
   */
  List<String> violations(OnDemandRestore restore) {
    if (records.size() != starts.size()) {
      throw new AssertionError(records.size() + " launch records for " + starts.size() + " launches");
    }
    List<ImageManifest.Allocation> allocations = restore.plan().manifest().allocations();
    List<String> out = new ArrayList<>();
    for (int k = 0; k < records.size(); k++) {
      SimLaunchRecord r = records.get(k);
      if (!r.kernelName().equals(kernels.get(k))) {
        throw new AssertionError("launch " + k + " ran " + r.kernelName() + ", the probe saw " + kernels.get(k));
      }
      lateTouches(k, r, starts.get(k).elapsedMillisSince(restore.originEvent()), allocations, restore, out);
    }
    return out;
  }

  /**
   * Adds to {@code out} each allocation of {@code allocations} that launch {@code k} ({@code r}, started at
   * {@code startMs} on the restore's clock) read or wrote before {@code restore} had it resident.
   */
  public static void lateTouches(int k, SimLaunchRecord r, double startMs, List<ImageManifest.Allocation> allocations,
      OnDemandRestore restore, List<String> out) {
    List<AddressRange> touched = new ArrayList<>(r.reads().ranges());
    touched.addAll(r.writes().ranges());
    for (AddressRange range : touched) {
      for (ImageManifest.Allocation a : allocations) {
        if (range.start() < a.address() + a.size() && a.address() < range.end()) {
          double residentMs = restore.residentMillis(a.name());
          if (residentMs > startMs) {
            out.add(String.format("launch %d (%s) touched %s of '%s' at %.3f ms; resident at %.3f ms", k,
                r.kernelName(), range, a.name(), startMs, residentMs));
          }
        }
      }
    }
  }

  @Override
  public void close() {
    sim.removeLaunchListener(listener);
    starts.forEach(GpuEvent::close);
  }
}
