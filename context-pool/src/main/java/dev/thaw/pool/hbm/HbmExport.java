package dev.thaw.pool.hbm;

import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.host.ProcessFds;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;

/**
 * Worker side, on eviction: hands the session's read-only slabs to the server as descriptors, so their device
 * memory outlives this worker. Only slabs created exportable (a session rebuilt with
 * {@link FunctionSession.SlabSource#EXPORTABLE_READ_ONLY}, or imported ones) can go, and only once they are
 * write-protected (the restore does that as each fills, see {@code docs/design/memory-tiers.md}): a slab that is not
 * could have been written, and is never handed on. The others are skipped.
 */
public final class HbmExport {

  private HbmExport() {}

  /**
   * One descriptor per exportable read-only slab, owned by the caller: keep them open until the server has taken
   * them ({@link HbmTier#offer}), then {@link #close} them.
   */
  public static List<ExportedSlab> exportReadOnly(FunctionSession session) {
    return exportReadOnly(session, List.of());
  }

  /**
   * Like {@link #exportReadOnly(FunctionSession)}, leaving out the slabs starting at {@code mayHaveBeenWritten}
   * (what {@code OnDemandRestore.mayHaveBeenWritten()} names: written, perhaps, before they were protected).
   */
  public static List<ExportedSlab> exportReadOnly(FunctionSession session, Collection<Long> mayHaveBeenWritten) {
    List<ExportedSlab> out = new ArrayList<>();
    try {
      for (FunctionSession.MappedSlab m : session.slabs()) {
        if (m.slab().readOnly() && m.memory().isExportable() && m.mapping().access() == MemoryAccess.READ
            && !mayHaveBeenWritten.contains(m.slab().address())) {
          out.add(new ExportedSlab(m.slab().address(), m.slab().size(), m.slab().buffers(), m.memory().exportPosixFd()));
        }
      }
      return out;
    } catch (RuntimeException e) {
      close(out);
      throw e;
    }
  }

  /** Closes the descriptors of {@code slabs} in this process. */
  public static void close(List<ExportedSlab> slabs) {
    slabs.forEach(s -> ProcessFds.close(s.fd()));
  }
}
