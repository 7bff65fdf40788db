package dev.thaw.pool.hbm;

import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.MapPlan;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.host.ProcessFds;
import java.io.IOException;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Worker side, becoming an image the HBM tier holds: a {@link FunctionSession.SlabSource} that maps each planned
 * read-only slab the tier has, imported from its descriptor and mapped <em>read-only</em> at the recorded address,
 * and gives every other slab fresh memory (read-only ones exportable, so this worker can hand them on in turn).
 * The buffers of imported slabs are {@link #residentBuffers() resident}: the restore must not copy them (it
 * could not: the mapping refuses writes).
 *
 * <p>A slab matches only when address, size and buffers are exactly those planned: the plan is a function of the
 * image's table and read-only set, so the exporter and the importer of one image plan the same slabs.
 */
public final class ResidentSlabs implements FunctionSession.SlabSource, AutoCloseable {

  private final Map<Long, ExportedSlab> byAddress = new HashMap<>();
  private final Set<String> resident = new LinkedHashSet<>();
  private long importNanos;

  /** @param slabs the tier's slabs with descriptors valid in this process (see {@link #take}) */
  public ResidentSlabs(List<ExportedSlab> slabs) {
    slabs.forEach(s -> byAddress.put(s.address(), s));
  }

  /**
   * Takes the server's descriptors into this process ({@code pidfd_getfd}, about 9 µs each).
   *
   * @throws IOException if the server is gone or this process may not take its descriptors
   */
  public static ResidentSlabs take(long serverPid, List<ExportedSlab> serverSlabs) throws IOException {
    List<ExportedSlab> mine = new java.util.ArrayList<>();
    try {
      for (ExportedSlab s : serverSlabs) {
        mine.add(s.withFd(ProcessFds.take(serverPid, s.fd())));
      }
    } catch (IOException e) {
      HbmExport.close(mine);
      throw e;
    }
    return new ResidentSlabs(mine);
  }

  @Override
  public FunctionSession.SlabBacking back(GpuContext context, MapPlan.Slab slab) {
    ExportedSlab held = slab.readOnly() ? byAddress.get(slab.address()) : null;
    if (held != null && held.size() == slab.size() && held.buffers().equals(slab.buffers())) {
      long t0 = System.nanoTime();
      PhysicalMemory memory = context.importMemory(held.fd(), held.size());
      importNanos += System.nanoTime() - t0;
      resident.addAll(slab.buffers());
      return new FunctionSession.SlabBacking(memory, MemoryAccess.READ);
    }
    return FunctionSession.SlabSource.EXPORTABLE_READ_ONLY.back(context, slab);
  }

  /** The buffers whose bytes are already on the device, mapped read-only: a restore skips them. */
  public Set<String> residentBuffers() {
    return Set.copyOf(resident);
  }

  /** Time spent in {@code cuMemImportFromShareableHandle}. */
  public double importMillis() {
    return importNanos / 1e6;
  }

  /** Closes this process's descriptors; imported memory stays mapped (the session owns its handles). */
  @Override
  public void close() {
    HbmExport.close(List.copyOf(byAddress.values()));
    byAddress.clear();
  }
}
