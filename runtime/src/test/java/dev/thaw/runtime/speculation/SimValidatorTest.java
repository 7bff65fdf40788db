package dev.thaw.runtime.speculation;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.LaunchInterceptor;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuModule;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Each hand-written kernel against its recorded accesses: speculation holds, or validation says where not. */
class SimValidatorTest {

  private static final Dim3 GRID = Dim3.of(2);
  private static final Dim3 BLOCK = Dim3.of(64);

  private static LaunchCheck only(SimValidator v) {
    List<LaunchCheck> all = v.launches();
    assertEquals(1, all.size(), all.toString());
    return all.get(0);
  }

  @Test
  void aKernelTouchingOnlyItsArgumentsIsExact() {
    try (SpecSession s = new SpecSession(); SimValidator v = SimValidator.attach(s.session)) {
      BufferRef x = s.floats("x", 100, 1);
      BufferRef y = s.floats("y", 100, 0);
      s.session.launch(s.kernel("spec_args_only"), GRID, BLOCK, x, y, 100);
      s.session.synchronize();
      LaunchCheck c = only(v);
      assertTrue(c.exact(), c.violations().toString());
      assertEquals("{x: READ, y: WRITE}", c.speculated().toString());
      assertEquals(400, c.reads().totalBytes());
      assertEquals(400, c.writes().totalBytes());
    }
  }

  @Test
  void readsThroughAPointerTableAreCaughtAndNameTheMissedBuffers() {
    try (SpecSession s = new SpecSession(); SimValidator v = SimValidator.attach(s.session)) {
      BufferRef tables = s.session.allocate("tables", 16);
      BufferRef out = s.floats("out", 8, 0);
      BufferRef t0 = s.floats("t0", 8, 10);
      BufferRef t1 = s.floats("t1", 8, 20);
      s.putLongs(tables, s.address(t0), s.address(t1));
      s.session.launch(s.kernel("spec_pointer_table"), GRID, BLOCK, tables, 2, out, 8);
      s.session.synchronize();
      LaunchCheck c = only(v);
      assertEquals("{tables: READ, out: WRITE}", c.speculated().toString());
      List<Violation> missed = c.violations();
      // One violation per recorded range: t0 is read at even indices (i % 2 == 0), t1 at odd ones.
      assertEquals(List.of("t0", "t1"), missed.stream().map(Violation::target).distinct().toList(), missed.toString());
      assertEquals(8, missed.size());
      for (Violation m : missed) {
        assertEquals(AccessKind.READ, m.access());
        assertEquals(Violation.Reason.NOT_SPECULATED, m.reason());
      }
      assertEquals(s.address(t0), missed.get(0).address());
    }
  }

  @Test
  void aPointerTableIntoAWriteOnlyBufferIsTheWrongKind() {
    try (SpecSession s = new SpecSession(); SimValidator v = SimValidator.attach(s.session)) {
      BufferRef tables = s.session.allocate("tables", 8);
      BufferRef out = s.floats("out", 8, 0);
      s.putLongs(tables, s.address(out));
      s.session.launch(s.kernel("spec_pointer_table"), GRID, BLOCK, tables, 1, out, 8);
      s.session.synchronize();
      Violation w = only(v).violations().get(0);
      assertEquals(Violation.Reason.WRONG_KIND, w.reason());
      assertEquals("out", w.target());
      assertEquals(AccessKind.READ, w.access());
    }
  }

  @Test
  void writingPastTheBufferIntoItsNeighbourIsCaughtAndNamesTheNeighbour() {
    try (SpecSession s = new SpecSession(); SimValidator v = SimValidator.attach(s.session)) {
      long granule = s.context.granularity();
      int n = (int) (granule / 4);
      BufferRef p = s.session.allocate("p", granule);
      BufferRef next = s.session.allocate("next", granule);
      assertEquals(s.address(p) + granule, s.address(next), "first fit puts the neighbour right after");
      s.session.launch(s.kernel("spec_write_past"), GRID, BLOCK, p, n, 16);
      s.session.synchronize();
      LaunchCheck c = only(v);
      assertEquals(1, c.violations().size(), c.violations().toString());
      Violation w = c.violations().get(0);
      assertEquals(AccessKind.WRITE, w.access());
      assertEquals("next", w.target());
      assertEquals(Violation.Reason.NOT_SPECULATED, w.reason());
      assertEquals(s.address(next), w.address());
      assertEquals(64, w.bytes());
    }
  }

  @Test
  void writingIntoThePaddingAfterABufferIsUnmapped() {
    try (SpecSession s = new SpecSession(); SimValidator v = SimValidator.attach(s.session)) {
      BufferRef p = s.floats("p", 1000, 0);
      s.session.launch(s.kernel("spec_write_past"), GRID, BLOCK, p, 1000, 4);
      s.session.synchronize();
      Violation w = only(v).violations().get(0);
      assertNull(w.allocation());
      assertEquals("unmapped", w.target());
      assertEquals(Violation.Reason.UNMAPPED, w.reason());
      assertEquals(s.address(p) + 4000, w.address());
      assertEquals(16, w.bytes());
    }
  }

  @Test
  void predicatedAndGenericStoresAreSpeculatedAsWrites() {
    try (SpecSession s = new SpecSession(); SimValidator v = SimValidator.attach(s.session)) {
      BufferRef src = s.floats("src", 128, 0);
      BufferRef dst = s.floats("dst", 128, 0);
      s.session.launch(s.kernel("spec_predicated"), GRID, BLOCK, src, dst, 0x42000000, 128);
      s.session.launch(s.kernel("spec_generic_ptr"), GRID, BLOCK, dst, 0, 128);
      s.session.launch(s.kernel("spec_generic_ptr"), GRID, BLOCK, dst, 1, 128);
      s.session.synchronize();
      List<LaunchCheck> all = v.launches();
      assertEquals(3, all.size());
      all.forEach(c -> assertTrue(c.exact(), c.kernel() + ": " + c.violations()));
      assertEquals("{src: READ, dst: WRITE}", all.get(0).speculated().toString());
      assertTrue(all.get(0).writes().totalBytes() > 0 && all.get(0).writes().totalBytes() < 512, "only some stored");
      assertEquals("{dst: WRITE}", all.get(1).speculated().toString());
      assertTrue(all.get(2).writes().isEmpty());
    }
  }

  @Test
  void accessesInsideDeviceFunctionsAreFollowed() {
    try (SpecSession s = new SpecSession(); SimValidator v = SimValidator.attach(s.session)) {
      BufferRef in = s.floats("in", 100, 0);
      BufferRef out = s.floats("out", 100, 0);
      BufferRef other = s.floats("other", 100, 0);
      s.session.launch(s.kernel("spec_calls"), GRID, BLOCK, in, out, other, 1, 100);
      s.session.launch(s.kernel("spec_calls"), GRID, BLOCK, in, out, other, 0, 100);
      s.session.launch(s.kernel("spec_generic"), GRID, BLOCK, out, in, 100);
      s.session.synchronize();
      for (LaunchCheck c : v.launches()) {
        assertTrue(c.exact(), c.kernel() + ": " + c.violations());
      }
      assertEquals("{in: READ, out: WRITE, other: WRITE}", v.launches().get(0).speculated().toString());
      assertEquals("{out: WRITE, in: READ}", v.launches().get(2).speculated().toString());
    }
  }

  @Test
  void aStructHoldingPointersIsExact() {
    try (SpecSession s = new SpecSession(); SimValidator v = SimValidator.attach(s.session)) {
      BufferRef in = s.floats("in", 50, 1);
      BufferRef out = s.floats("out", 50, 0);
      BufferRef sum = s.session.allocate("sum", 8);
      ByteBuffer p = ByteBuffer.allocate(32).order(ByteOrder.LITTLE_ENDIAN);
      p.putLong(0, s.address(in)).putInt(8, 50).putFloat(12, 0.5f).putLong(16, s.address(out))
          .putLong(24, s.address(sum));
      s.session.launch(s.kernel("spec_struct"), GRID, BLOCK, (Object) p.array());
      s.session.synchronize();
      LaunchCheck c = only(v);
      assertTrue(c.exact(), c.violations().toString());
      assertEquals("{in: READ, out: WRITE, sum: READ_WRITE}", c.speculated().toString());
    }
  }

  @Test
  void conservativeKernelsStayExact() {
    try (SpecSession s = new SpecSession(); SimValidator v = SimValidator.attach(s.session)) {
      BufferRef p = s.floats("p", 32, 0);
      BufferRef slot = s.session.allocate("slot", 8);
      BufferRef unused = s.floats("unused", 32, 0);
      s.session.launch(s.kernel("spec_escape"), GRID, BLOCK, p, slot);
      s.session.launch(s.kernel("spec_indirect"), GRID, BLOCK, p, unused, 1, 32);
      s.session.synchronize();
      v.launches().forEach(c -> assertTrue(c.exact(), c.kernel() + ": " + c.violations()));
      assertEquals("{p: READ_WRITE, slot: WRITE}", v.launches().get(0).speculated().toString());
      assertEquals("{p: READ_WRITE, unused: READ}", v.launches().get(1).speculated().toString());
    }
  }

  @Test
  void launchesOutsideTheSessionAreUnmatchedAndClosingRestoresTheInterceptor() {
    try (SpecSession s = new SpecSession()) {
      LaunchInterceptor mine = (kernel, grid, block, shmem, stream, args) -> {};
      s.session.setLaunchInterceptor(mine);
      BufferRef x = s.floats("x", 8, 0);
      try (SimValidator v = SimValidator.attach(s.session)) {
        GpuModule direct = s.context.loadPtx(SpeculationKernels.ptx());
        direct.kernel("spec_args_only").launch(Dim3.of(1), Dim3.of(8), s.session.stream(), s.address(x),
            s.address(x), 8);
        s.session.synchronize();
        assertTrue(v.launches().isEmpty());
        assertEquals(1, v.unmatched().size());
        direct.close();
      }
      assertSame(mine, s.session.launchInterceptor());
    }
  }
}
