package dev.thaw.runtime.function;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * Pins packed allocations: a recording session puts its buffers 256-byte aligned into a few slabs, keeps each
 * buffer's name, address and size in its table, and a rebuild (in another driver: another process) maps any
 * table, packed or per-buffer as images built before packing, as a few slabs at the recorded addresses, with
 * read-only buffers in slabs of their own.
 */
class PackedSessionTest {

  private static final long MIB = 1L << 20;

  @Test
  void manySmallBuffersShareOneSlabAndKeepTheirOwnAddresses() {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession s = FunctionSession.record(ctx)) {
      List<BufferRef> refs = new ArrayList<>();
      for (int i = 0; i < 300; i++) {
        refs.add(s.allocate("b" + i, 5000 + i));
      }
      assertEquals(1, s.slabs().size(), "1.5 MB of buffers in one 2 MiB slab");
      long previousEnd = 0;
      for (AllocationRecord a : s.table().allocations()) {
        assertEquals(0, a.address() % 256, a.name());
        assertTrue(a.address() >= previousEnd, "disjoint, in allocation order: " + a.name());
        previousEnd = a.address() + a.size();
      }
      for (int i = 0; i < 300; i += 37) {
        s.upload(refs.get(i), 0, filled(5000 + i, i));
      }
      for (int i = 0; i < 300; i += 37) {
        assertEquals(filled(5000 + i, i), download(s, refs.get(i)), "b" + i + " kept its bytes");
      }
    }
  }

  @Test
  void largeBuffersGrowTheSlabSpaceContiguously() {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession s = FunctionSession.record(ctx)) {
      for (int i = 0; i < 6; i++) {
        s.allocate("w" + i, 3 * MIB + 100);
      }
      List<AllocationRecord> t = s.table().allocations();
      for (int i = 1; i < t.size(); i++) {
        long gap = t.get(i).address() - (t.get(i - 1).address() + t.get(i - 1).size());
        assertTrue(gap >= 0 && gap < 256, "back to back: gap " + gap);
      }
      MapPlan plan = MapPlan.of(t, Set.of(), ctx.granularity());
      assertEquals(1, plan.slabs().size(), "one run of pages: " + plan);
      assertTrue(plan.mappedBytes() <= 20 * MIB, "no 2 MiB rounding per buffer: " + plan.mappedBytes());
    }
  }

  @Test
  void aRebuildInAnotherProcessMapsAFewSlabsAtTheRecordedAddresses() {
    SessionTable table;
    List<ByteBuffer> contents = new ArrayList<>();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession s = FunctionSession.record(ctx)) {
      for (int i = 0; i < 40; i++) {
        s.allocate("t" + i, (i % 5 == 0) ? 3 * MIB : 777 * (i + 1));
      }
      table = s.table();
    }
    try (SimDriver other = SimDriver.open(new SimOptions()); GpuContext ctx = other.createContext(0);
        FunctionSession r = FunctionSession.rebuild(ctx, table)) {
      assertEquals(table.allocations(), r.table().allocations(), "names, addresses and sizes unchanged");
      assertTrue(r.slabs().size() <= 2, "slabs: " + r.slabs().size());
      for (int i = 0; i < 40; i += 7) {
        BufferRef ref = new BufferRef("t" + i);
        ByteBuffer data = filled((int) r.size(ref), i + 3);
        r.upload(ref, 0, data);
        contents.add(data);
        assertEquals(data, download(r, ref));
      }
    }
  }

  @Test
  void aPerBufferTableFromBeforePackingRebuildsAsOneSlab() {
    SessionTable table;
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession s = FunctionSession.record(ctx, FunctionSession.Packing.PER_BUFFER)) {
      for (int i = 0; i < 100; i++) {
        s.allocate("old" + i, 1000 + i);
      }
      assertTrue(s.slabs().isEmpty());
      table = s.table();
      assertEquals(0, table.allocations().get(1).address() % ctx.granularity(), "each on its own pages");
    }
    try (SimDriver other = SimDriver.open(new SimOptions()); GpuContext ctx = other.createContext(0);
        FunctionSession r = FunctionSession.rebuild(ctx, table)) {
      assertEquals(table.allocations(), r.table().allocations());
      assertEquals(1, r.slabs().size(), "100 buffers, one mapping");
      assertEquals(100 * 2 * MIB, r.slabs().get(0).slab().size());
      BufferRef last = new BufferRef("old99");
      r.upload(last, 0, filled(1099, 9));
      assertEquals(filled(1099, 9), download(r, last));
    }
  }

  @Test
  void readOnlyBuffersGetSlabsOfTheirOwnAndOnlyWholeOnes() {
    long g = 2 * MIB;
    long base = 0x7f0000000000L;
    // w0, w1: read-only, pages 0-1; w2: read-only but shares page 2 with act: it rides in the read-write slab.
    List<AllocationRecord> t = List.of(
        new AllocationRecord("w0", base, MIB),
        new AllocationRecord("w1", base + MIB, 3 * MIB),
        new AllocationRecord("w2", base + 4 * MIB, MIB),
        new AllocationRecord("act", base + 5 * MIB, 256),
        new AllocationRecord("w3", base + 6 * MIB, 4 * MIB));
    MapPlan plan = MapPlan.of(t, Set.of("w0", "w1", "w2", "w3"), g);
    assertEquals(3, plan.slabs().size(), plan.toString());
    assertEquals(new MapPlan.Slab(base, 4 * MIB, true, List.of("w0", "w1")), plan.slabs().get(0));
    assertEquals(new MapPlan.Slab(base + 4 * MIB, 2 * MIB, false, List.of("w2", "act")), plan.slabs().get(1));
    assertEquals(new MapPlan.Slab(base + 6 * MIB, 4 * MIB, true, List.of("w3")), plan.slabs().get(2));
    assertEquals(1, MapPlan.of(t, Set.of(), g).slabs().size(), "without read-only buffers: one slab");
    // Packed: w1 runs into the page act starts on; the read-only slab ends where that page begins.
    List<AllocationRecord> packed = List.of(
        new AllocationRecord("w0", base, 3 * MIB),
        new AllocationRecord("w1", base + 3 * MIB + 256, 2 * MIB),
        new AllocationRecord("act", base + 5 * MIB + 512, 4096));
    MapPlan p = MapPlan.of(packed, Set.of("w0", "w1"), g);
    assertEquals(List.of(new MapPlan.Slab(base, 4 * MIB, true, List.of("w0", "w1")),
        new MapPlan.Slab(base + 4 * MIB, 2 * MIB, false, List.of("w1", "act"))), p.slabs());
    assertThrows(IllegalArgumentException.class, () -> MapPlan.of(List.of(new AllocationRecord("a", base, 100),
        new AllocationRecord("b", base + 50, 100)), Set.of(), g));
  }

  @Test
  void protectedReadOnlySlabsRefuseWritesAndReadOnlyMemoryCanBeExported() {
    SessionTable table;
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession s = FunctionSession.record(ctx)) {
      s.allocate("weights", 4 * MIB);
      s.allocate("act", 1000);
      table = s.table();
    }
    try (SimDriver other = SimDriver.open(new SimOptions()); GpuContext ctx = other.createContext(0);
        FunctionSession r = FunctionSession.rebuild(ctx, table, Set.of("weights"),
            FunctionSession.SlabSource.EXPORTABLE_READ_ONLY)) {
      List<FunctionSession.MappedSlab> ro = r.slabs().stream().filter(m -> m.slab().readOnly()).toList();
      assertEquals(1, ro.size());
      assertEquals(List.of("weights"), ro.get(0).slab().buffers());
      assertTrue(ro.get(0).memory().isExportable());
      assertFalse(r.slabs().stream().filter(m -> !m.slab().readOnly()).findFirst().orElseThrow().memory()
          .isExportable());
      r.upload(new BufferRef("weights"), 0, filled(4096, 1));
      r.protectReadOnlySlabs();
      assertEquals(MemoryAccess.READ, ro.get(0).mapping().access());
      assertThrows(CudaException.class, () -> r.upload(new BufferRef("weights"), 0, filled(16, 2)));
      r.upload(new BufferRef("act"), 0, filled(16, 3));
      assertEquals(filled(4096, 1), download(r, new BufferRef("weights")).limit(4096));
    }
  }

  private static ByteBuffer filled(int n, int seed) {
    ByteBuffer b = ByteBuffer.allocateDirect(n).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < n; i++) {
      b.put(i, (byte) (i * 31 + seed));
    }
    return b;
  }

  private static ByteBuffer download(FunctionSession s, BufferRef ref) {
    ByteBuffer b = ByteBuffer.allocateDirect((int) s.size(ref)).order(ByteOrder.LITTLE_ENDIAN);
    s.download(ref, 0, b);
    return b;
  }
}
