package dev.thaw.pool.hbm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.SessionTable;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * Pins what a worker may hand the HBM tier: only read-only slabs that are write-protected, and not one the restore
 * names as perhaps written before that. A slab whose restore never completed (so never protected) could have been
 * written by the function, and is never offered to the next worker.
 */
class HbmExportTest {

  private static final long MIB = 1L << 20;

  @Test
  void onlyWriteProtectedReadOnlySlabsAreExported() {
    SessionTable table;
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession s = FunctionSession.record(ctx)) {
      s.allocate("weights", 4 * MIB);
      s.allocate("act", 1000);
      table = s.table();
    }
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession s = FunctionSession.rebuild(ctx, table, Set.of("weights"),
            FunctionSession.SlabSource.EXPORTABLE_READ_ONLY)) {
      assertTrue(HbmExport.exportReadOnly(s).isEmpty(), "a read-only slab not protected yet is not handed on");
      s.protectReadOnlySlabs();
      List<ExportedSlab> slabs = HbmExport.exportReadOnly(s);
      try {
        assertEquals(1, slabs.size());
        assertEquals(List.of("weights"), slabs.get(0).buffers());
        assertEquals(4 * MIB, slabs.get(0).size());
      } finally {
        HbmExport.close(slabs);
      }
      long address = s.slabs().stream().filter(m -> m.slab().readOnly()).findFirst().orElseThrow().slab().address();
      assertTrue(HbmExport.exportReadOnly(s, List.of(address)).isEmpty(),
          "a slab that may have been written before its protection is not handed on");
    }
  }
}
