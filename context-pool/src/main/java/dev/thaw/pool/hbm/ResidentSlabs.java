package dev.thaw.pool.hbm;

import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.MapPlan;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.host.ProcessFds;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Worker side, becoming an image the HBM tier holds: a {@link FunctionSession.SlabSource} that maps each planned
 * read-only slab the tier has, imported from its descriptor and mapped <em>read-only</em> at the recorded address,
 * and gives every other slab fresh memory (read-only ones exportable, so this worker can hand them on in turn).
 * The bytes of imported slabs are {@link #residentRanges() resident}: the restore must not copy them (it could
 * not: the mapping refuses writes).
 *
 * <p>A slab matches only when address, size and buffers are exactly those planned: the plan is a function of the
 * image's table and read-only set, so the exporter and the importer of one image plan the same slabs.
 */
public final class ResidentSlabs implements FunctionSession.SlabSource, AutoCloseable {

  private final Map<Long, ExportedSlab> byAddress = new HashMap<>();
  private final Set<String> imported = new LinkedHashSet<>();
  private final Set<String> notImported = new LinkedHashSet<>();
  private final List<long[]> ranges = new ArrayList<>();
  private long importNanos;

  /** @param slabs the tier's slabs with descriptors valid in this process (see {@link #take}) */
  public ResidentSlabs(List<ExportedSlab> slabs) {
    slabs.forEach(s -> byAddress.put(s.address(), s));
  }

  /**
   * Takes the server's descriptors into this process: one {@code pidfd_open}, then a {@code pidfd_getfd} per slab
   * (about 9 µs each); all or none.
   *
   * @throws IOException if the server is gone or this process may not take its descriptors
   */
  public static ResidentSlabs take(long serverPid, List<ExportedSlab> serverSlabs) throws IOException {
    int[] theirs = new int[serverSlabs.size()];
    for (int i = 0; i < theirs.length; i++) {
      theirs[i] = serverSlabs.get(i).fd();
    }
    int[] fds = ProcessFds.takeAll(serverPid, theirs);
    List<ExportedSlab> mine = new ArrayList<>(fds.length);
    for (int i = 0; i < fds.length; i++) {
      mine.add(serverSlabs.get(i).withFd(fds[i]));
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
      imported.addAll(slab.buffers());
      ranges.add(new long[] {slab.address(), slab.end()});
      return new FunctionSession.SlabBacking(memory, MemoryAccess.READ);
    }
    notImported.addAll(slab.buffers());
    return FunctionSession.SlabSource.EXPORTABLE_READ_ONLY.back(context, slab);
  }

  /**
   * The buffers whose bytes are all on the device already, mapped read-only: a restore skips them. A buffer
   * that also has bytes in a slab that was not imported is not here; {@link #residentRanges()} says which of its
   * bytes are.
   */
  public Set<String> residentBuffers() {
    Set<String> out = new LinkedHashSet<>(imported);
    out.removeAll(notImported);
    return out;
  }

  /** The device ranges {@code [start, end)} mapped from the tier, in plan order: a restore copies nothing there. */
  public List<long[]> residentRanges() {
    return ranges.stream().map(long[]::clone).toList();
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
