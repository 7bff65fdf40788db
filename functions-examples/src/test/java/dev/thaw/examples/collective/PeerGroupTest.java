package dev.thaw.examples.collective;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.examples.wait.WaitFunction;
import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Thaw's collectives on four simulated peer devices: every rank gets the rank-order sum (or the whole gathered
 * matrix) bit for bit; an exchange waits for a peer whose partial lands late; a kernel reading a peer's memory that
 * was not granted to its device faults as on a GPU; devices that cannot form a group are refused with the reason; a
 * rank that fails while issuing releases the others instead of hanging them.
 */
class PeerGroupTest {

  /** Contexts and streams of {@code ranks} simulated devices, closed in order. */
  private static final class Ranks implements AutoCloseable {
    final SimDriver driver;
    final List<GpuContext> contexts = new ArrayList<>();
    final List<GpuStream> streams = new ArrayList<>();

    Ranks(int ranks, SimOptions options) {
      driver = SimDriver.open(options.setDeviceCount(Math.max(ranks, options.deviceCount())));
      for (int r = 0; r < ranks; r++) {
        GpuContext c = driver.createContext(r);
        contexts.add(c);
        streams.add(c.createStream());
      }
    }

    Ranks(int ranks) {
      this(ranks, new SimOptions());
    }

    @Override
    public void close() {
      streams.forEach(GpuStream::close);
      contexts.forEach(GpuContext::close);
      driver.close();
    }
  }

  @ParameterizedTest
  @CsvSource({"2, FLOAT32", "3, FLOAT32", "4, FLOAT32", "2, BFLOAT16", "4, FLOAT16"})
  void everyRankAddsTheRankOrderSumOfAllPartialsToItsOwnX(int n, PartialType type) {
    int elements = 8 * 37;
    Random random = new Random(n * 31L + type.ordinal());
    float[][] partial = new float[n][elements];
    float[][] x = new float[n][elements];
    for (int r = 0; r < n; r++) {
      for (int i = 0; i < elements; i++) {
        partial[r][i] = rounded(type, (float) random.nextGaussian());
        x[r][i] = (float) random.nextGaussian();
      }
    }
    try (Ranks ranks = new Ranks(n); PeerGroup group = PeerGroup.open(ranks.streams)) {
      PeerBuffer partials = group.allocate("partial", (long) elements * type.bytes());
      List<DeviceBuffer> xs = new ArrayList<>();
      for (int r = 0; r < n; r++) {
        ranks.contexts.get(r).copyHostToDevice(partials.address(r), encode(type, partial[r]));
        DeviceBuffer b = ranks.contexts.get(r).allocate(4L * elements);
        b.copyFromHost(encode(PartialType.FLOAT32, x[r]));
        xs.add(b);
      }
      group.run(rank -> group.allReduceAdd(rank, partials, xs.get(rank).address(), elements, type));
      group.synchronize();
      for (int r = 0; r < n; r++) {
        float[] expected = new float[elements];
        for (int i = 0; i < elements; i++) {
          float s = partial[0][i];
          for (int q = 1; q < n; q++) {
            s += partial[q][i];
          }
          expected[i] = x[r][i] + s;
        }
        assertArrayEquals(expected, download(ranks.contexts.get(r), xs.get(r).address(), elements),
            "rank " + r + " of " + n);
        xs.get(r).close();
      }
    }
  }

  @Test
  void everyRankGathersTheWholeMatrixFromUnevenColumnSlices() {
    int n = 3;
    int rows = 2;
    int columns = 97;
    float[] whole = new float[rows * columns];
    for (int i = 0; i < whole.length; i++) {
      whole[i] = i * 0.5f - 7;
    }
    try (Ranks ranks = new Ranks(n); PeerGroup group = PeerGroup.open(ranks.streams)) {
      PeerBuffer slices = group.allocate("slices", 4L * rows * (columns / n + 1));
      List<DeviceBuffer> outs = new ArrayList<>();
      for (int r = 0; r < n; r++) {
        int start = CollectiveKernels.sliceStart(columns, r, n);
        int width = CollectiveKernels.sliceStart(columns, r + 1, n) - start;
        float[] slice = new float[rows * width];
        for (int m = 0; m < rows; m++) {
          System.arraycopy(whole, m * columns + start, slice, m * width, width);
        }
        ranks.contexts.get(r).copyHostToDevice(slices.address(r), encode(PartialType.FLOAT32, slice));
        outs.add(ranks.contexts.get(r).allocate(4L * whole.length));
      }
      group.run(rank -> group.allGatherColumns(rank, slices, outs.get(rank).address(), rows, columns));
      group.synchronize();
      for (int r = 0; r < n; r++) {
        assertArrayEquals(whole, download(ranks.contexts.get(r), outs.get(r).address(), whole.length), "rank " + r);
        outs.get(r).close();
      }
    }
  }

  @Test
  void anExchangeWaitsForAPeerWhosePartialLandsLate() {
    int elements = 64;
    try (Ranks ranks = new Ranks(2); PeerGroup group = PeerGroup.open(ranks.streams);
        GpuModule wait = ranks.contexts.get(1).loadPtx(WaitFunction.ptx());
        DeviceBuffer waited = ranks.contexts.get(1).allocate(8);
        PinnedBuffer late = ranks.contexts.get(1).allocatePinned(4L * elements)) {
      PeerBuffer partials = group.allocate("partial", 4L * elements);
      List<DeviceBuffer> xs = new ArrayList<>();
      for (int r = 0; r < 2; r++) {
        xs.add(ranks.contexts.get(r).allocate(4L * elements));
        ranks.contexts.get(r).memsetD32(xs.get(r).address(), 0, elements);
        ranks.contexts.get(r).memsetD32(partials.address(r), Float.floatToIntBits(1f), elements);
      }
      for (int i = 0; i < elements; i++) {
        late.slice(0, 4 * elements).order(ByteOrder.LITTLE_ENDIAN).putFloat(4 * i, 100f);
      }
      group.run(rank -> {
        if (rank == 1) {
          // Rank 1's partial is written only after 50 ms of other work on its stream.
          wait.kernel("wait_ns").launch(Dim3.of(1), Dim3.of(1), group.stream(1), 50_000_000L, waited.address());
          group.stream(1).copyHostToDeviceAsync(partials.address(1), late, 0, 4L * elements);
        }
        group.allReduceAdd(rank, partials, xs.get(rank).address(), elements, PartialType.FLOAT32);
      });
      group.synchronize();
      for (int r = 0; r < 2; r++) {
        float[] got = download(ranks.contexts.get(r), xs.get(r).address(), elements);
        for (float v : got) {
          assertEquals(101f, v, "rank " + r + " summed before rank 1's partial landed");
        }
        xs.get(r).close();
      }
    }
  }

  @Test
  void aKernelReadingPeerMemoryNotGrantedToItsDeviceFaults() {
    try (Ranks ranks = new Ranks(2); CollectiveKernels k = CollectiveKernels.load(ranks.contexts.get(0));
        DeviceBuffer own = ranks.contexts.get(0).allocate(4096);
        DeviceBuffer peer = ranks.contexts.get(1).allocate(4096)) {
      // Granted to device 0, the same kernel reads the peer's bytes.
      peer.setAccessFor(0, dev.thaw.runtime.gpu.MemoryAccess.READ);
      k.allReduceAdd(ranks.streams.get(0), own.address(), new long[] {own.address(), peer.address()}, 2, 64,
          PartialType.FLOAT32);
      ranks.streams.get(0).synchronize();
      // Not granted: device 0 has no access to this one, as on a GPU.
      try (DeviceBuffer hidden = ranks.contexts.get(1).allocate(4096)) {
        k.allReduceAdd(ranks.streams.get(0), own.address(), new long[] {own.address(), hidden.address()}, 2, 64,
            PartialType.FLOAT32);
        CudaException e = assertThrows(CudaException.class, () -> ranks.streams.get(0).synchronize());
        assertEquals(CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, e.code());
        assertTrue(e.getMessage().contains("without access"), e.getMessage());
      }
    }
  }

  @Test
  void devicesThatCannotHoldAGroupAreRefusedWithTheReason() {
    try (SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(4))) {
      assertNull(PeerGroup.whyUnusable(driver, new int[] {0, 1, 2, 3}));
      assertTrue(PeerGroup.whyUnusable(driver, new int[] {0, 0}).contains("named twice"));
      assertTrue(PeerGroup.whyUnusable(driver, new int[] {0, 4}).contains("no device 4"));
      assertTrue(PeerGroup.whyUnusable(driver, new int[] {0, 1, 2, 3, 0}).contains("1 to 4 ranks"));
      assertTrue(PeerGroup.whyUnusable(driver, new int[] {}).contains("1 to 4 ranks"));
    }
    try (Ranks ranks = new Ranks(2, new SimOptions().setPeerAccess(false))) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PeerGroup.open(ranks.streams));
      assertTrue(e.getMessage().contains("not peers"), e.getMessage());
    }
  }

  @Test
  void aRankThatFailsWhileIssuingReleasesTheOthersAndTheGroupRunsAgain() {
    try (Ranks ranks = new Ranks(3); PeerGroup group = PeerGroup.open(ranks.streams)) {
      PeerBuffer partials = group.allocate("partial", 4L * 8);
      List<DeviceBuffer> xs = new ArrayList<>();
      for (int r = 0; r < 3; r++) {
        xs.add(ranks.contexts.get(r).allocate(32));
        ranks.contexts.get(r).memsetD32(xs.get(r).address(), 0, 8);
        ranks.contexts.get(r).memsetD32(partials.address(r), Float.floatToIntBits(r + 1f), 8);
      }
      AtomicInteger reached = new AtomicInteger();
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> group.run(rank -> {
        if (rank == 2) {
          throw new IllegalArgumentException("rank 2 cannot issue");
        }
        group.allReduceAdd(rank, partials, xs.get(rank).address(), 8, PartialType.FLOAT32);
        reached.incrementAndGet();
      }));
      assertEquals("rank 2 cannot issue", e.getMessage());
      assertEquals(0, reached.get(), "a rank passed an exchange its peer never reached");
      assertEquals(2, e.getSuppressed().length, "the other ranks' releases are kept with the failure");
      group.run(rank -> group.allReduceAdd(rank, partials, xs.get(rank).address(), 8, PartialType.FLOAT32));
      group.synchronize();
      for (int r = 0; r < 3; r++) {
        assertArrayEquals(new float[] {6, 6, 6, 6, 6, 6, 6, 6}, download(ranks.contexts.get(r), xs.get(r).address(),
            8));
        xs.get(r).close();
      }
    }
  }

  @Test
  void exchangesAreMadeOnlyFromTheRanksOwnThreads() {
    try (Ranks ranks = new Ranks(2); PeerGroup group = PeerGroup.open(ranks.streams);
        DeviceBuffer x = ranks.contexts.get(0).allocate(32)) {
      PeerBuffer partials = group.allocate("partial", 32);
      IllegalStateException e = assertThrows(IllegalStateException.class,
          () -> group.allReduceAdd(0, partials, x.address(), 8, PartialType.FLOAT32));
      assertTrue(e.getMessage().contains("inside run()"), e.getMessage());
      IllegalArgumentException tooMany = assertThrows(IllegalArgumentException.class, () -> group.run(
          rank -> group.allReduceAdd(rank, partials, x.address(), 16, PartialType.FLOAT32)));
      assertTrue(tooMany.getMessage().contains("do not fit"), tooMany.getMessage());
      assertNotNull(group.context(1));
    }
  }

  private static float rounded(PartialType type, float v) {
    return switch (type) {
      case FLOAT32 -> v;
      case BFLOAT16 -> HalfType.BF16.toFloat(HalfType.BF16.fromFloat(v));
      case FLOAT16 -> HalfType.FP16.toFloat(HalfType.FP16.fromFloat(v));
    };
  }

  private static ByteBuffer encode(PartialType type, float[] v) {
    ByteBuffer b = ByteBuffer.allocateDirect(type.bytes() * v.length).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < v.length; i++) {
      switch (type) {
        case FLOAT32 -> b.putFloat(4 * i, v[i]);
        case BFLOAT16 -> b.putShort(2 * i, HalfType.BF16.fromFloat(v[i]));
        case FLOAT16 -> b.putShort(2 * i, HalfType.FP16.fromFloat(v[i]));
      }
    }
    return b;
  }

  private static float[] download(GpuContext context, long address, int n) {
    ByteBuffer b = ByteBuffer.allocateDirect(4 * n).order(ByteOrder.LITTLE_ENDIAN);
    context.copyDeviceToHost(b, address);
    float[] out = new float[n];
    b.asFloatBuffer().get(out);
    return out;
  }
}
