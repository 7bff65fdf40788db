package dev.thaw.runtime.gpu.sim;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.gpu.PinnedBuffer;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * Pins GPU-like sticky errors, as CUDA has them ({@code docs/design/gpu-driver.md}): a fault is reported at the next
 * synchronization, then by all device work on every context of the driver (a CUDA process), while address-space
 * bookkeeping works.
 */
class SimContextPoisonTest {

  private SimDriver driver;

  @BeforeEach
  void open() {
    driver = SimDriver.open(new SimOptions().setMemoryBytes(64L << 20));
  }

  @AfterEach
  void close() {
    driver.close();
  }

  @Test
  void outOfBoundsReadPoisonsTheWholeDevice() {
    SimContext ctx = (SimContext) driver.createContext(0);
    GpuContext other = driver.createContext(0);
    List<SimLaunchRecord> records = new CopyOnWriteArrayList<>();
    ctx.addLaunchListener(records::add);
    GpuModule module = ctx.loadPtx(TestKernels.PTX);
    GpuStream stream = ctx.createStream();
    GpuEvent event = ctx.createEvent();
    DeviceBuffer buf = ctx.allocate(1);
    DeviceBuffer otherBuf = other.allocate(1);

    // Reserved but never mapped: unmapped on a GPU too. (One past buf would be otherBuf: contexts of one
    // driver share the address space, as contexts of one process do.)
    long past = ctx.reserve(1, 0).address();
    module.kernel("sim_test_read_at").launch(Dim3.of(1), Dim3.of(1), stream, past, buf.address());
    // The launch returned normally; the error comes with the next synchronization.
    CudaException e = assertThrows(CudaException.class, stream::synchronize);
    assertEquals(CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, e.code());
    assertEquals("CUDA_ERROR_ILLEGAL_ADDRESS", e.errorName());

    SimLaunchRecord r = records.get(0);
    assertTrue(r.reads().isEmpty() && r.writes().isEmpty(), r.toString());
    assertTrue(r.fault().orElseThrow().getMessage().contains(String.format("0x%x", past)), r.toString());

    List<Executable> later = List.of(
        ctx::synchronize,
        () -> ctx.createStream(),
        () -> ctx.loadPtx(TestKernels.PTX),
        () -> ctx.copyHostToDevice(buf.address(), ByteBuffer.allocate(4)),
        () -> ctx.memsetD8(buf.address(), (byte) 1, 4),
        () -> stream.isIdle(),
        () -> stream.memsetD8Async(buf.address(), (byte) 1, 4),
        () -> event.record(stream),
        () -> event.isComplete(),
        () -> module.kernel("sim_test_scale"),
        () -> other.memsetD8(otherBuf.address(), (byte) 3, 16),
        other::synchronize);
    for (Executable call : later) {
      CudaException again = assertThrows(CudaException.class, call);
      assertEquals(CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, again.code(), again.getMessage());
    }

    // Bookkeeping still works, as on CUDA; device work on a context created afterwards does not.
    ctx.allocate(1).close();
    buf.setAccess(MemoryAccess.READ);
    try (GpuContext fresh = driver.createContext(0); DeviceBuffer b = fresh.allocate(64)) {
      CudaException stuck = assertThrows(CudaException.class, () -> fresh.memsetD32(b.address(), 1, 16));
      assertEquals(CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, stuck.code());
    }
    // A new driver, the sim's new process, is unaffected.
    try (SimDriver next = SimDriver.open(new SimOptions().setMemoryBytes(64L << 20));
        GpuContext fresh = next.createContext(0); DeviceBuffer b = fresh.allocate(64)) {
      fresh.memsetD32(b.address(), 0x01020304, 16);
      ByteBuffer host = ByteBuffer.allocate(64);
      b.copyToHost(host);
      assertEquals(0x04, host.get(0));
    }

    ctx.close();
    ctx.close();
    assertThrows(IllegalStateException.class, ctx::synchronize);
    other.close();
  }

  @Test
  void aKernelThatThrowsFailsTheLaunchWithLaunchFailed() {
    try (SimContext ctx = (SimContext) driver.createContext(0)) {
      GpuStream stream = ctx.createStream();
      ctx.loadPtx(TestKernels.PTX).kernel("sim_test_throws").launch(Dim3.of(1), Dim3.of(1), stream);
      CudaException e = assertThrows(CudaException.class, ctx::synchronize);
      assertEquals(CudaError.CUDA_ERROR_LAUNCH_FAILED, e.code());
      assertTrue(ctx.poisonedBy().orElseThrow().getCause() instanceof ArithmeticException);
    }
  }

  @Test
  void queuedWorkSkippedAfterAFaultAndEventsStillComplete() {
    try (SimContext ctx = (SimContext) driver.createContext(0)) {
      GpuStream stream = ctx.createStream();
      GpuModule module = ctx.loadPtx(TestKernels.PTX);
      DeviceBuffer buf = ctx.allocate(64);
      GpuEvent done = ctx.createEvent();
      module.kernel("sim_test_increment").launch(Dim3.of(1), Dim3.of(1), stream, buf, 1, 50);
      module.kernel("sim_test_read_at").launch(Dim3.of(1), Dim3.of(1), stream, 8L, buf.address());
      stream.memsetD8Async(buf.address(), (byte) 9, 4);
      done.record(stream);
      assertThrows(CudaException.class, done::synchronize);
      assertEquals(CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, ctx.poisonedBy().orElseThrow().code());
    }
  }

  /**
   * A copy engine never writes read-only memory: a copy queued while its destination was writable, still queued when
   * the mapping was made read-only, is an illegal address (sticky) and lands nothing. Why a restore protects a slab
   * only once every copy has completed.
   */
  @Test
  void aCopyQueuedBeforeItsDestinationTurnedReadOnlyFaultsWhenItRuns() throws Exception {
    try (SimContext ctx = (SimContext) driver.createContext(0); DeviceBuffer buf = ctx.allocate(4096);
        PinnedBuffer host = ctx.allocatePinned(4096)) {
      SimStream stream = (SimStream) ctx.createStream();
      ctx.memsetD8(buf.address(), (byte) 0x5a, 4096);
      host.slice(0, 4096).put(new byte[4096]);
      CountDownLatch release = new CountDownLatch(1);
      // Holds the stream until the mapping is read-only: the copy behind it runs only then.
      stream.enqueue(release::await);
      stream.copyHostToDeviceAsync(buf.address(), host, 0, 4096);
      buf.setAccess(MemoryAccess.READ);
      release.countDown();
      CudaException e = assertThrows(CudaException.class, stream::synchronize);
      assertEquals(CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, e.code());
      assertTrue(e.getMessage().contains("made READ while work of its context was queued or running"),
          e.getMessage());
      // Read behind the device's back: the poisoned device refuses copies.
      SimAddressSpace.Segment[] segs = driver.space().segments(0);
      assertEquals(0x5a, SimNative.U.getByte(SimAddressSpace.find(segs, buf.address()).delta
          + buf.address()), "the copy landed nothing");
    }
  }

  /**
   * The hazard model: making a mapping read-only while any stream of its context has work queued or running (here a
   * stream held on a task) poisons the device at once, even when that work never touches the mapping; the call itself
   * succeeds, as {@code cuMemSetAccess} does. With every stream idle, or when access widens, nothing happens.
   */
  @Test
  void aMappingMadeReadOnlyWhileWorkIsInFlightFaultsThatWork() throws Exception {
    try (SimContext ctx = (SimContext) driver.createContext(0); DeviceBuffer idle = ctx.allocate(4096);
        DeviceBuffer busy = ctx.allocate(4096); DeviceBuffer other = ctx.allocate(4096)) {
      SimStream stream = (SimStream) ctx.createStream();
      idle.setAccess(MemoryAccess.READ);
      assertTrue(ctx.poisonedBy().isEmpty(), "no work in flight: nothing to fault");
      CountDownLatch release = new CountDownLatch(1);
      stream.enqueue(release::await);
      stream.memsetD8Async(other.address(), (byte) 1, 4096);
      idle.setAccess(MemoryAccess.READ_WRITE);
      assertTrue(ctx.poisonedBy().isEmpty(), "widening access faults nothing");
      busy.setAccess(MemoryAccess.READ);
      release.countDown();
      CudaException e = assertThrows(CudaException.class, stream::synchronize);
      assertEquals(CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, e.code());
      assertTrue(e.getMessage().contains("cuMemSetAccess") && e.getMessage().contains(
          Long.toHexString(busy.address())), e.getMessage());
    }
  }
}
