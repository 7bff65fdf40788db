package dev.thaw.runtime.gpu.sim;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.PinnedBuffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Pins stream ordering, asynchrony, event waits, the bandwidth model and worker-thread lifecycle. */
class SimStreamTest {

  private SimDriver driver;
  private SimContext ctx;
  private Kernel increment;

  @BeforeEach
  void open() {
    driver = SimDriver.open(new SimOptions().setMemoryBytes(256L << 20));
    ctx = (SimContext) driver.createContext(0);
    increment = ctx.loadPtx(TestKernels.PTX).kernel("sim_test_increment");
  }

  @AfterEach
  void close() {
    ctx.close();
    driver.close();
  }

  private int readInt(DeviceBuffer b) {
    ByteBuffer host = ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN);
    b.copyToHost(host);
    return host.getInt(0);
  }

  @Test
  void workRunsInOrderOffTheCallersThread() {
    GpuStream stream = ctx.createStream();
    DeviceBuffer buf = ctx.allocate(4);
    AtomicReference<Thread> ranOn = new AtomicReference<>();
    ctx.addLaunchListener(r -> ranOn.set(Thread.currentThread()));
    // x -> 2x + 1 after a memset to 5, three times: 5, 11, 23, 47; any reordering gives another number.
    stream.memsetD32Async(buf.address(), 5, 1);
    increment.launch(Dim3.of(1), Dim3.of(1), stream, buf, 1, 30);
    increment.launch(Dim3.of(1), Dim3.of(1), stream, buf, 1, 0);
    increment.launch(Dim3.of(1), Dim3.of(1), stream, buf, 1, 0);
    assertFalse(stream.isIdle(), "the first launch sleeps 30 ms; launch must not have waited for it");
    stream.synchronize();
    assertTrue(stream.isIdle());
    assertEquals(47, readInt(buf));
    assertNotSame(Thread.currentThread(), ranOn.get());
  }

  @Test
  void waitForOrdersAcrossStreamsOnTheRecordAsOfTheCall() {
    GpuStream producer = ctx.createStream();
    GpuStream consumer = ctx.createStream();
    DeviceBuffer buf = ctx.allocate(4);
    GpuEvent ready = ctx.createEvent(false);
    // The producer's slow kernel turns 0 into 1; the consumer's memset to 100 must come after it.
    increment.launch(Dim3.of(1), Dim3.of(1), producer, buf, 1, 50);
    ready.record(producer);
    consumer.waitFor(ready);
    consumer.memsetD32Async(buf.address(), 100, 1);
    // A record after the waitFor call does not hold the consumer back.
    increment.launch(Dim3.of(1), Dim3.of(1), producer, buf, 1, 300);
    ready.record(producer);
    consumer.synchronize();
    assertFalse(producer.isIdle(), "the consumer waited for the later record");
    assertEquals(100, readInt(buf));
    producer.synchronize();
    assertEquals(201, readInt(buf));
  }

  @Test
  void eventsTimeCompletedWorkAndReportTheirState() throws Exception {
    GpuStream stream = ctx.createStream();
    DeviceBuffer buf = ctx.allocate(4);
    GpuEvent start = ctx.createEvent();
    GpuEvent end = ctx.createEvent();
    GpuEvent untimed = ctx.createEvent(false);
    assertTrue(end.isComplete(), "a never-recorded event is complete");
    start.record(stream);
    // Held until released: the end is not reached, however late this thread runs (a 40 ms kernel alone was not
    // enough on a loaded two-core machine).
    ctx.loadPtx(TestKernels.PTX).kernel("sim_test_hold").launch(Dim3.of(1), Dim3.of(1), stream);
    increment.launch(Dim3.of(1), Dim3.of(1), stream, buf, 1, 40);
    end.record(stream);
    untimed.record(stream);
    try {
      CudaException notReady = assertThrows(CudaException.class, () -> end.elapsedMillisSince(start));
      assertEquals(CudaError.CUDA_ERROR_NOT_READY, notReady.code());
    } finally {
      TestKernels.Hold.release();
    }
    end.synchronize();
    assertTrue(end.isComplete());
    assertTrue(end.elapsedMillisSince(start) >= 39f, "elapsed " + end.elapsedMillisSince(start));
    untimed.synchronize();
    CudaException noTiming = assertThrows(CudaException.class, () -> untimed.elapsedMillisSince(start));
    assertEquals(CudaError.CUDA_ERROR_INVALID_HANDLE, noTiming.code());
    end.close();
    end.close();
    assertThrows(IllegalStateException.class, end::isComplete);
  }

  @Test
  void copiesAreCheckedBeforeTheyAreQueued() {
    GpuStream stream = ctx.createStream();
    DeviceBuffer buf = ctx.allocate(4096);
    try (PinnedBuffer pinned = ctx.allocatePinned(4096)) {
      assertThrows(IllegalArgumentException.class, () -> stream.copyHostToDeviceAsync(buf.address(), pinned, 4000, 200));
      assertThrows(IllegalArgumentException.class, () -> stream.copyDeviceToHostAsync(pinned, -1, buf.address(), 8));
      long unmapped = buf.address() + buf.mappedSize();
      CudaException e = assertThrows(CudaException.class, () -> stream.copyHostToDeviceAsync(unmapped, pinned, 0, 8));
      assertEquals(CudaError.CUDA_ERROR_INVALID_VALUE, e.code());
      assertTrue(stream.isIdle());

      pinned.asByteBuffer().putLong(0, 0x1122334455667788L);
      stream.copyHostToDeviceAsync(buf.address() + 8, pinned, 0, 8);
      stream.copyDeviceToHostAsync(pinned, 100, buf.address() + 8, 8);
      stream.synchronize();
      assertEquals(0x1122334455667788L, pinned.slice(100, 8).getLong(0));
    }
  }

  @Test
  void theBandwidthModelMakesCopiesTakeAtLeastTheirModelledTime() {
    try (SimDriver slow = SimDriver.open(new SimOptions().setCopyGBps(1.0)); SimContext c =
        (SimContext) slow.createContext(0)) {
      GpuStream stream = c.createStream();
      DeviceBuffer buf = c.allocate(4 << 20);
      PinnedBuffer pinned = c.allocatePinned(4 << 20);
      // 1 MB at 1 GB/s: 1 ms each; ten async copies then one 4 MB sync copy (4 ms).
      long t0 = System.nanoTime();
      for (int i = 0; i < 10; i++) {
        stream.copyHostToDeviceAsync(buf.address(), pinned, 0, 1_000_000);
      }
      stream.synchronize();
      long asyncNanos = System.nanoTime() - t0;
      assertTrue(asyncNanos >= 10_000_000, "10 modelled ms took " + asyncNanos / 1e6 + " ms");

      long t1 = System.nanoTime();
      c.copyDeviceToHost(ByteBuffer.allocateDirect(4_000_000), buf.address());
      long syncNanos = System.nanoTime() - t1;
      assertTrue(syncNanos >= 4_000_000, "4 modelled ms took " + syncNanos / 1e6 + " ms");
    }
  }

  @Test
  void closingTheContextStopsEveryWorker() throws Exception {
    SimContext c = (SimContext) driver.createContext(0);
    Kernel inc = c.loadPtx(TestKernels.PTX).kernel("sim_test_increment");
    DeviceBuffer buf = c.allocate(4);
    GpuStream busy = c.createStream();
    GpuStream idle = c.createStream();
    GpuStream closedEarly = c.createStream();
    GpuStream waiting = c.createStream();
    GpuEvent never = c.createEvent();
    closedEarly.close();
    for (int i = 0; i < 5; i++) {
      inc.launch(Dim3.of(1), Dim3.of(1), busy, buf, 1, 100);
    }
    never.record(busy);
    waiting.waitFor(never);
    waiting.memsetD8Async(buf.address(), (byte) 0, 4);
    List<Thread> workers = c.workerThreads();
    assertTrue(workers.size() >= 3, workers.toString());
    long t0 = System.nanoTime();
    c.close();
    assertTrue(System.nanoTime() - t0 < 5_000_000_000L, "close must not run the queued work");
    for (Thread t : workers) {
      assertFalse(t.isAlive(), t.getName() + " is still alive");
    }
    assertEquals(List.of(), liveWorkersOf(c));
    assertThrows(IllegalStateException.class, () -> busy.synchronize());
    assertThrows(IllegalStateException.class, () -> idle.isIdle());
    assertEquals(0, driver.memoryInUse());
  }

  /** Live threads named for this context's streams. */
  private static List<String> liveWorkersOf(SimContext c) {
    String prefix = "thaw-sim-stream-" + c.toString().replaceAll("\\D+", " ").trim().split(" ")[0] + "-";
    return Thread.getAllStackTraces().keySet().stream().map(Thread::getName).filter(n -> n.startsWith(prefix))
        .collect(Collectors.toList());
  }

  @Test
  void aClosedStreamFinishesItsWorkThenItsWorkerEnds() throws Exception {
    GpuStream stream = ctx.createStream();
    DeviceBuffer buf = ctx.allocate(4);
    increment.launch(Dim3.of(1), Dim3.of(1), stream, buf, 1, 20);
    Thread worker = ((SimStream) stream).worker();
    stream.close();
    stream.close();
    assertThrows(IllegalStateException.class, stream::synchronize);
    worker.join(5_000);
    assertFalse(worker.isAlive());
    assertEquals(1, readInt(buf));
  }
}
