package dev.thaw.runtime.ptx.instrument;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.function.IntFunction;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * The instrumented test kernels (instrument.cu) on a GPU: each runs plain and instrumented with the same
 * inputs; the outputs must be the same bytes and the reported violations exactly the planted ones (address,
 * size, kind, and the function of the reporting site). Skipped, with the reason, where no GPU is usable.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class InstrumentedKernelsGpuTest {

  private CudaDriver driver;
  private GpuContext context;
  private GpuStream stream;
  private GpuModule plain;
  private GpuModule instrumented;
  private InstrumentedModule rewrite;
  private ValidatingLauncher launcher;
  private final List<DeviceBuffer> buffers = new ArrayList<>();

  @BeforeAll
  void open() {
    if (!CudaDriver.availability().available()) {
      return;
    }
    driver = CudaDriver.open();
    context = driver.createContext(0);
    stream = context.createStream();
    String ptx = TestPtx.resource(TestPtx.INSTRUMENT);
    plain = context.loadPtx(ptx);
    rewrite = PtxInstrumenter.instrument(ptx);
    instrumented = context.loadPtx(rewrite.ptx());
    launcher = new ValidatingLauncher(context);
  }

  @BeforeEach
  void needsAGpu() {
    DriverAvailability a = CudaDriver.availability();
    Assumptions.assumeTrue(a.available(), () -> "no usable GPU: " + a.unavailabilityCause());
  }

  @AfterEach
  void free() {
    if (context != null) {
      context.synchronize();
    }
    buffers.forEach(DeviceBuffer::close);
    buffers.clear();
  }

  @AfterAll
  void close() {
    if (driver == null) {
      return;
    }
    launcher.close();
    instrumented.close();
    plain.close();
    stream.close();
    context.close();
    driver.close();
  }

  @Test
  void argumentsOnlyReportsNothing() {
    int n = 10000;
    DeviceBuffer x = alloc(4L * n);
    DeviceBuffer y = alloc(4L * n);
    GuardTable allowed = GuardTable.builder().allow(x.address(), 4L * n, GuardTable.READ)
        .allow(y.address(), 4L * n, GuardTable.WRITE).build();
    ViolationReport r = runBoth("thaw_instr_args_only", Dim3.of(8), Dim3.of(256),
        () -> {
          fillFloats(x, n, i -> 0.5f * i);
          zero(y);
        }, new Object[] {x, y, n}, allowed, y);
    expect("thaw_instr_args_only", r, List.of(), "thaw_instr_args_only");
  }

  @Test
  void readsThroughAPointerTableReportOnlyTheBufferNotAllowed() {
    int n = 1000;
    int count = 4;
    DeviceBuffer[] b = new DeviceBuffer[count];
    for (int k = 0; k < count; k++) {
      b[k] = alloc(4L * n);
    }
    DeviceBuffer table = alloc(8L * count);
    DeviceBuffer out = alloc(4L * n);
    GuardTable.Builder allowed = GuardTable.builder().maxViolations(4096)
        .allow(table.address(), 8L * count, GuardTable.READ).allow(out.address(), 4L * n, GuardTable.WRITE);
    for (int k = 0; k < count; k++) {
      if (k != 2) {
        allowed.allow(b[k].address(), 4L * n, GuardTable.READ);
      }
    }
    Runnable init = () -> {
      for (int k = 0; k < count; k++) {
        int kk = k;
        fillFloats(b[k], n, i -> kk * 1000 + i);
      }
      ByteBuffer t = direct(8L * count);
      for (int k = 0; k < count; k++) {
        t.putLong(8 * k, b[k].address());
      }
      upload(table, t);
      zero(out);
    };
    Object[] args = {table, count, n, out};
    ViolationReport r = runBoth("thaw_instr_pointer_table", Dim3.of(4), Dim3.of(256), init, args, allowed.build(), out);
    List<GuardViolation> expected = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      expected.add(new GuardViolation(-1, b[2].address() + 4L * i, 4, AccessOp.READ));
    }
    expect("thaw_instr_pointer_table", r, expected, "thaw_instr_pointer_table");

    // The same with room for 10 records: all are counted, 10 are kept.
    r = runBoth("thaw_instr_pointer_table", Dim3.of(4), Dim3.of(256), init, args,
        allowed.maxViolations(10).build(), out);
    assertEquals(n, r.total(), "violations counted past the table's capacity");
    assertEquals(10, r.recorded().size());
    assertTrue(r.truncated());
  }

  @Test
  void writesPastTheBufferIntoTheNeighbourAreReported() {
    int n = 1000;
    int extra = 24;
    int neighbourBytes = 1024;
    DeviceBuffer src = alloc(4L * n);
    // dst and its neighbour share one mapping, as a caching allocator's blocks do.
    DeviceBuffer region = alloc(4L * n + neighbourBytes);
    long dst = region.address();
    long neighbour = dst + 4L * n;
    GuardTable allowed = GuardTable.builder().allow(src.address(), 4L * n, GuardTable.READ)
        .allow(dst, 4L * n, GuardTable.WRITE).allow(neighbour, neighbourBytes, GuardTable.READ).build();
    ViolationReport r = runBoth("thaw_instr_overflow", Dim3.of(4), Dim3.of(256),
        () -> {
          fillFloats(src, n, i -> i);
          ByteBuffer pattern = direct(4L * n + neighbourBytes);
          for (int i = 0; i < pattern.capacity(); i++) {
            pattern.put(i, (byte) 0x5a);
          }
          upload(region, pattern);
        }, new Object[] {src, dst, n, extra}, allowed, region);
    List<GuardViolation> expected = new ArrayList<>();
    for (int j = 0; j < extra; j++) {
      expected.add(new GuardViolation(-1, neighbour + 4L * j, 4, AccessOp.WRITE));
    }
    expect("thaw_instr_overflow", r, expected, "thaw_instr_overflow");
  }

  @Test
  void predicatedOffAndSharedGenericStoresAreNotReported() {
    int n = 64;
    DeviceBuffer out = alloc(4L * 3 * n);
    DeviceBuffer victim = alloc(4L * n);
    GuardTable allowed = GuardTable.builder().allow(out.address(), 4L * 3 * n, GuardTable.READ_WRITE)
        .allow(victim.address(), 4L * n, GuardTable.READ).build();
    ViolationReport r = runBoth("thaw_instr_predicated_generic", Dim3.of(1), Dim3.of(n),
        () -> {
          zero(out);
          zero(victim);
        }, new Object[] {out, victim, n}, allowed, out, victim);
    List<GuardViolation> expected = new ArrayList<>();
    expected.add(new GuardViolation(-1, victim.address() + 4L * 3, 4, AccessOp.WRITE)); // the predicated store
    for (int i = 1; i < n; i += 4) {
      expected.add(new GuardViolation(-1, victim.address() + 4L * i, 4, AccessOp.WRITE)); // generic, to global
    }
    expect("thaw_instr_predicated_generic", r, expected, "thaw_instr_predicated_generic");
    long generic = r.recorded().stream().filter(v -> rewrite.site(v.site()).generic()).count();
    assertEquals(n / 4, generic, "violations reported by the generic store: " + r.recorded());
  }

  @Test
  void accessesInsideDeviceFunctionsAreChecked() {
    int n = 256;
    DeviceBuffer x = alloc(4L * n);
    DeviceBuffer out = alloc(4L * n);
    DeviceBuffer victim = alloc(4L * 16);
    GuardTable allowed = GuardTable.builder().allow(x.address(), 4L * n, GuardTable.READ)
        .allow(out.address(), 4L * n, GuardTable.WRITE).allow(victim.address(), 64, GuardTable.READ).build();
    ViolationReport r = runBoth("thaw_instr_calls", Dim3.of(1), Dim3.of(n),
        () -> {
          fillFloats(x, n, i -> 2 * i);
          zero(out);
          zero(victim);
        }, new Object[] {x, out, victim, n}, allowed, out, victim);
    expect("thaw_instr_calls", r, List.of(new GuardViolation(-1, victim.address() + 8, 4, AccessOp.WRITE)),
        "thaw_instr_store_at");
  }

  @Test
  void atomicsNeedReadAndWrite() {
    int n = 500;
    DeviceBuffer counter = alloc(8);
    DeviceBuffer x = alloc(4L * n);
    DeviceBuffer seen = alloc(4L * n);
    Runnable init = () -> {
      ByteBuffer v = direct(4L * n);
      for (int i = 0; i < n; i++) {
        v.putInt(4 * i, (i * 7) % 1000);
      }
      upload(x, v);
      zero(counter);
      zero(seen);
    };
    Object[] args = {counter, x, seen, n};
    IntFunction<GuardTable> allowed = counterKind -> GuardTable.builder().maxViolations(2048)
        .allow(x.address(), 4L * n, GuardTable.READ).allow(seen.address(), 4L * n, GuardTable.WRITE)
        .allow(counter.address(), 8, counterKind).build();
    ViolationReport clean = runBoth("thaw_instr_atomics", Dim3.of(2), Dim3.of(256), init, args,
        allowed.apply(GuardTable.READ_WRITE), counter, seen);
    expect("thaw_instr_atomics (counter read-write)", clean, List.of(), "thaw_instr_atomics");

    ViolationReport r = runBoth("thaw_instr_atomics", Dim3.of(2), Dim3.of(256), init, args,
        allowed.apply(GuardTable.READ), counter, seen);
    List<GuardViolation> expected = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      expected.add(new GuardViolation(-1, counter.address(), 4, AccessOp.ATOMIC));
      expected.add(new GuardViolation(-1, counter.address() + 4, 4, AccessOp.ATOMIC));
    }
    expect("thaw_instr_atomics (counter read-only)", r, expected, "thaw_instr_atomics");
  }

  @Test
  void cpAsyncSourcesAreChecked() {
    int n = 256;
    DeviceBuffer src = alloc(16L * n);
    DeviceBuffer dst = alloc(16L * n);
    GuardTable allowed = GuardTable.builder().allow(src.address(), 16L * (n - 1), GuardTable.READ)
        .allow(dst.address(), 16L * n, GuardTable.WRITE).build();
    ViolationReport r = runBoth("thaw_instr_cp_async", Dim3.of(2), Dim3.of(128),
        () -> {
          fillFloats(src, 4 * n, i -> i + 0.25f);
          zero(dst);
        }, new Object[] {src, dst, n}, allowed, dst);
    expect("thaw_instr_cp_async", r, List.of(new GuardViolation(-1, src.address() + 16L * (n - 1), 16, AccessOp.READ)),
        "thaw_instr_cp_async");
  }

  @Test
  void aZeroByteCpAsyncReadsNothingAndIsNotReported() {
    int n = 200;
    int threads = 256;
    DeviceBuffer src = alloc(16L * n);
    DeviceBuffer dst = alloc(16L * threads);
    // Threads n..255 zero-fill from src + 16 i, past src's 16 n bytes (inside its mapping): allowed is exactly src.
    GuardTable allowed = GuardTable.builder().allow(src.address(), 16L * n, GuardTable.READ)
        .allow(dst.address(), 16L * threads, GuardTable.WRITE).build();
    ViolationReport r = runBoth("thaw_instr_cp_async_zfill", Dim3.of(2), Dim3.of(128),
        () -> {
          fillFloats(src, 4 * n, i -> i + 0.5f);
          fillFloats(dst, 4 * threads, i -> -1f);
        }, new Object[] {src, dst, n}, allowed, dst);
    expect("thaw_instr_cp_async_zfill", r, List.of(), "thaw_instr_cp_async_zfill");
    ByteBuffer out = read(dst).get(0);
    for (int i = 0; i < 4 * threads; i++) {
      float want = i < 4 * n ? i + 0.5f : 0f;
      assertEquals(want, out.getFloat(4 * i), "dst float " + i);
    }
  }

  // ---- running ----

  /**
   * Runs {@code kernel} plain, then instrumented, each after {@code init}; checks the outputs are the same
   * bytes and returns the instrumented run's violations.
   */
  private ViolationReport runBoth(String kernel, Dim3 grid, Dim3 block, Runnable init, Object[] args,
      GuardTable allowed, DeviceBuffer... outputs) {
    Kernel k = plain.kernel(kernel);
    KernelArgs a = k.newArgs().setAll(args);
    init.run();
    context.synchronize();
    k.launch(grid, block, 0, stream, a);
    stream.synchronize();
    List<ByteBuffer> expected = read(outputs);
    init.run();
    context.synchronize();
    ViolationReport r = launcher.launch(instrumented.kernel(kernel), grid, block, 0, stream, a, allowed);
    List<ByteBuffer> got = read(outputs);
    for (int o = 0; o < outputs.length; o++) {
      ByteBuffer e = expected.get(o);
      ByteBuffer g = got.get(o);
      int mismatch = e.mismatch(g);
      if (mismatch >= 0) {
        int differing = 0;
        for (int i = 0; i < e.capacity(); i++) {
          differing += e.get(i) != g.get(i) ? 1 : 0;
        }
        fail(String.format("%s: output %d (%s) differs between plain and instrumented: first at byte %d "
            + "(plain 0x%02x, instrumented 0x%02x), %d of %d bytes differ", kernel, o, outputs[o], mismatch,
            e.get(mismatch), g.get(mismatch), differing, e.capacity()));
      }
    }
    return r;
  }

  /**
   * Compares violations as multisets of (address, size, kind); every reporting site must be a checked
   * instruction of {@code siteFunction} of the same kind.
   */
  private void expect(String what, ViolationReport r, List<GuardViolation> expected, String siteFunction) {
    Comparator<GuardViolation> order = Comparator.comparingLong(GuardViolation::address)
        .thenComparing(GuardViolation::kind).thenComparingInt(GuardViolation::size);
    List<GuardViolation> want = expected.stream().map(v -> new GuardViolation(-1, v.address(), v.size(), v.kind()))
        .sorted(order).toList();
    List<GuardViolation> got = r.recorded().stream().map(v -> new GuardViolation(-1, v.address(), v.size(), v.kind()))
        .sorted(order).toList();
    if (!want.equals(got) || r.total() != expected.size()) {
      List<GuardViolation> missing = new ArrayList<>(want);
      got.forEach(missing::remove);
      List<GuardViolation> unexpected = new ArrayList<>(got);
      want.forEach(unexpected::remove);
      fail(String.format("%s: expected %d violations, the device counted %d and recorded %d;%n  missing (%d): %s%n"
          + "  unexpected (%d): %s%n  sites: %s", what, expected.size(), r.total(), r.recorded().size(), missing.size(),
          abbreviate(missing), unexpected.size(), abbreviate(unexpected),
          r.recorded().stream().map(GuardViolation::site).distinct().map(this::describeSite).toList()));
    }
    for (GuardViolation v : r.recorded()) {
      AccessSite s = rewrite.site(v.site());
      if (!s.function().equals(siteFunction) || s.kind() != v.kind()) {
        fail(what + ": " + v + " was reported by " + s + ", expected a " + v.kind() + " site of " + siteFunction);
      }
    }
  }

  private String describeSite(int id) {
    try {
      return rewrite.site(id).toString();
    } catch (IllegalArgumentException e) {
      return "unknown site " + id;
    }
  }

  private static String abbreviate(List<GuardViolation> list) {
    return list.size() <= 8 ? list.toString() : list.subList(0, 8) + " and " + (list.size() - 8) + " more";
  }

  // ---- memory ----

  private DeviceBuffer alloc(long bytes) {
    DeviceBuffer b = context.allocate(bytes);
    buffers.add(b);
    return b;
  }

  private void fillFloats(DeviceBuffer b, int n, IntToFloat f) {
    ByteBuffer v = direct(4L * n);
    for (int i = 0; i < n; i++) {
      v.putFloat(4 * i, f.apply(i));
    }
    upload(b, v);
  }

  private void zero(DeviceBuffer b) {
    context.memsetD8(b.address(), (byte) 0, b.size());
  }

  private void upload(DeviceBuffer b, ByteBuffer data) {
    context.copyHostToDevice(b.address(), data);
  }

  private List<ByteBuffer> read(DeviceBuffer... outputs) {
    stream.synchronize();
    context.synchronize();
    List<ByteBuffer> out = new ArrayList<>();
    for (DeviceBuffer b : outputs) {
      ByteBuffer h = direct(b.size());
      context.copyDeviceToHost(h, b.address());
      out.add(h);
    }
    return out;
  }

  private static ByteBuffer direct(long bytes) {
    return ByteBuffer.allocateDirect(Math.toIntExact(bytes)).order(ByteOrder.LITTLE_ENDIAN);
  }

  @FunctionalInterface
  private interface IntToFloat {
    float apply(int i);
  }

}
