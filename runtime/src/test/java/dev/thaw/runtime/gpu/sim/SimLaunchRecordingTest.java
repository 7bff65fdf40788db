package dev.thaw.runtime.gpu.sim;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.MemoryAccess;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Pins that each launch reports exactly the device bytes it read and wrote, and that results are right. */
class SimLaunchRecordingTest {

  private SimDriver driver;
  private SimContext ctx;
  private GpuModule module;
  private GpuStream stream;
  private final List<SimLaunchRecord> records = new CopyOnWriteArrayList<>();

  @BeforeEach
  void open() {
    driver = SimDriver.open(new SimOptions().setMemoryBytes(64L << 20));
    ctx = (SimContext) driver.createContext(0);
    ctx.addLaunchListener(records::add);
    module = ctx.loadPtx(TestKernels.PTX);
    stream = ctx.createStream();
  }

  @AfterEach
  void close() {
    ctx.close();
    driver.close();
  }

  @Test
  void scaleRecordsExactlyTheInputReadAndTheOutputWritten() {
    DeviceBuffer a = ctx.allocate(4096);
    DeviceBuffer b = ctx.allocate(4096);
    int n = 100;
    ByteBuffer in = ByteBuffer.allocate(4 * n).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < n; i++) {
      in.putFloat(i);
    }
    in.flip();
    a.copyFromHost(in);

    Kernel scale = module.kernel("sim_test_scale");
    scale.launch(Dim3.of(1), Dim3.of(128), stream, a, b, n, 2.5f);
    stream.synchronize();

    assertEquals(1, records.size());
    SimLaunchRecord r = records.get(0);
    assertEquals("sim_test_scale", r.kernelName());
    assertEquals(List.of(AddressRange.of(a.address(), 4L * n)), r.reads().ranges());
    assertEquals(List.of(AddressRange.of(b.address(), 4L * n)), r.writes().ranges());
    assertTrue(r.fault().isEmpty());
    ByteBuffer args = ByteBuffer.wrap(r.args()).order(ByteOrder.LITTLE_ENDIAN);
    assertEquals(a.address(), args.getLong(0));
    assertEquals(b.address(), args.getLong(8));
    assertEquals(n, args.getInt(16));

    ByteBuffer out = ByteBuffer.allocate(4 * n).order(ByteOrder.LITTLE_ENDIAN);
    b.copyToHost(out);
    for (int i = 0; i < n; i++) {
      assertEquals(i * 2.5f, out.getFloat(4 * i), "element " + i);
    }
  }

  @Test
  void interleavedScalarReadsOfTwoArraysGiveTwoRanges() {
    DeviceBuffer a = ctx.allocate(1024);
    DeviceBuffer b = ctx.allocate(1024);
    DeviceBuffer out = ctx.allocate(1024);
    Kernel add = module.kernel("sim_test_add_into");
    add.launch(Dim3.of(1), Dim3.of(64), stream, a, b, out, 64);
    stream.synchronize();

    SimLaunchRecord r = records.get(0);
    assertEquals(AccessLog.of(AddressRange.of(a.address(), 256), AddressRange.of(b.address(), 256)), r.reads());
    assertEquals(List.of(AddressRange.of(out.address(), 256)), r.writes().ranges());
  }

  @Test
  void bulkAccessesAreRecordedAndComputeTheSame() {
    DeviceBuffer a = ctx.allocate(1024);
    DeviceBuffer b = ctx.allocate(1024);
    DeviceBuffer out = ctx.allocate(1024);
    ctx.memsetD32(a.address(), 7, 33);
    ctx.memsetD32(a.address() + 4 * 33, 5, 33);
    // Two arrays in one allocation, adjacent: their reads must merge into one range.
    Kernel add = module.kernel("sim_test_add_into");
    add.launch(Dim3.of(1), Dim3.of(33), stream, a.address(), a.address() + 4 * 33, out, 33);
    stream.synchronize();

    SimLaunchRecord r = records.get(0);
    assertEquals(List.of(AddressRange.of(a.address(), 8 * 33)), r.reads().ranges());
    assertEquals(List.of(AddressRange.of(out.address(), 4 * 33)), r.writes().ranges());
    ByteBuffer host = ByteBuffer.allocateDirect(4 * 33).order(ByteOrder.LITTLE_ENDIAN);
    out.copyToHost(host);
    assertEquals(7 + 5, host.getInt(0));
    assertEquals(7 + 5, host.getInt(4 * 32));
  }

  @Test
  void writeToReadOnlyMemoryFaultsAndTheRecordSaysSo() {
    DeviceBuffer in = ctx.allocate(1024);
    DeviceBuffer ro = ctx.allocate(1024);
    ro.setAccess(MemoryAccess.READ);
    Kernel readAt = module.kernel("sim_test_read_at");
    readAt.launch(Dim3.of(1), Dim3.of(1), stream, in, ro);

    var e = Assertions.assertThrows(CudaException.class, stream::synchronize);
    assertEquals(CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, e.code());
    SimLaunchRecord r = records.get(0);
    assertEquals(List.of(AddressRange.of(in.address(), 4)), r.reads().ranges());
    assertTrue(r.writes().isEmpty());
    assertEquals(CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, r.fault().orElseThrow().code());
    assertTrue(r.fault().get().getMessage().contains("read-only"), r.fault().get().getMessage());
  }

  @Test
  void argumentsAreCopiedAtLaunchSoTheSlabIsReusable() {
    DeviceBuffer a = ctx.allocate(1024);
    DeviceBuffer b = ctx.allocate(1024);
    Kernel scale = module.kernel("sim_test_scale");
    var args = scale.newArgs().set(0, a).set(1, b).set(2, 4).set(3, 1f);
    scale.launch(Dim3.of(1), Dim3.of(1), 0, stream, args);
    args.set(2, 8);
    scale.launch(Dim3.of(1), Dim3.of(1), 0, stream, args);
    stream.synchronize();

    assertEquals(16, records.get(0).writes().totalBytes());
    assertEquals(32, records.get(1).writes().totalBytes());
    assertArrayEquals(new long[] {4, 8}, records.stream()
        .mapToLong(r -> ByteBuffer.wrap(r.args()).order(ByteOrder.LITTLE_ENDIAN).getInt(16)).toArray());
  }
}
