package dev.thaw.pool.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.SessionTable;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.runtime.gpu.MemoryAccess;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * Pins what a recycled worker zeroes before it frees an image's memory: every byte of every slab (the mapped tail past
 * the buffers too, and read-only slabs the restore protected), and nothing of the slabs the HBM tier holds, which keep
 * their bytes and their read-only access. Read back through the device, on whichever device the tests run.
 */
class DeviceScrubTest {

  private static final byte DIRTY = 0x77;

  @Test
  void everySlabButTheTiersIsZeroedAndTheTiersKeepTheirBytes() {
    try (GpuDriver driver = GpuDrivers.open(); GpuContext ctx = driver.createContext(0)) {
      SessionTable table;
      try (FunctionSession recorded = FunctionSession.record(ctx)) {
        recorded.allocate("weights", 3L << 20);
        recorded.allocate("scratch", (1L << 20) + 100);
        table = recorded.table();
      }
      try (FunctionSession s = FunctionSession.rebuild(ctx, table, Set.of("weights"),
          FunctionSession.SlabSource.FRESH)) {
        List<FunctionSession.MappedSlab> slabs = s.slabs();
        assertEquals(2, slabs.size(), "a read-only slab and a writable one");
        long all = dirty(ctx, slabs);
        s.protectReadOnlySlabs();
        DeviceScrub.Result r = DeviceScrub.scrub(s, List.of());
        assertEquals(new DeviceScrub.Result(all, 0), r);
        for (FunctionSession.MappedSlab m : slabs) {
          assertEquals(m.slab().size(), count(ctx, m, (byte) 0), "slab at " + m.slab().address() + " zeroed");
        }

        dirty(ctx, slabs);
        s.protectReadOnlySlabs();
        FunctionSession.MappedSlab tiers = slabs.stream().filter(m -> m.slab().readOnly()).findFirst().orElseThrow();
        FunctionSession.MappedSlab mine = slabs.stream().filter(m -> !m.slab().readOnly()).findFirst().orElseThrow();
        r = DeviceScrub.scrub(s, List.of(new long[] {tiers.slab().address(), tiers.slab().end()}));
        assertEquals(new DeviceScrub.Result(mine.slab().size(), tiers.slab().size()), r);
        assertEquals(tiers.slab().size(), count(ctx, tiers, DIRTY), "the tier's slab is left as it was");
        assertEquals(MemoryAccess.READ, tiers.mapping().access(), "and read-only");
        assertEquals(mine.slab().size(), count(ctx, mine, (byte) 0));
      }
    }
  }

  /** Fills every slab (made writable) with {@link #DIRTY}; returns their bytes. */
  private static long dirty(GpuContext ctx, List<FunctionSession.MappedSlab> slabs) {
    long all = 0;
    for (FunctionSession.MappedSlab m : slabs) {
      m.mapping().setAccess(MemoryAccess.READ_WRITE);
      ctx.memsetD8(m.slab().address(), DIRTY, m.slab().size());
      all += m.slab().size();
    }
    ctx.synchronize();
    return all;
  }

  private static long count(GpuContext ctx, FunctionSession.MappedSlab m, byte value) {
    ByteBuffer b = ByteBuffer.allocateDirect((int) m.slab().size());
    ctx.copyDeviceToHost(b, m.slab().address());
    long n = 0;
    for (int i = 0; i < b.capacity(); i++) {
      n += b.get(i) == value ? 1 : 0;
    }
    return n;
  }
}
