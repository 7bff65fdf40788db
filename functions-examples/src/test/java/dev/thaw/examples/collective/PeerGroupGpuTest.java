package dev.thaw.examples.collective;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.function.IntFunction;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Thaw's collectives on real peer GPUs: a {@link PeerGroup} over every visible device (2 to 4) whose every pair are
 * peers, one stream each. Every rank's all-reduce result, for fp32, bf16 and fp16 partials from one vector unit to a
 * tensor-parallel Llama layer's output at 8192 tokens, is compared bit for bit with the host's rank-order fp32 sum
 * and with the same group on the simulated device (the kernels' Java twins); so is every rank's gathered vocabulary.
 * A length the kernels cannot take is refused on the GPU too, and the group runs on after it. The all-reduce's
 * median time at 16 KiB, 1 MiB and 64 MiB is printed (lines starting {@value #TIMING}), never asserted.
 *
 * <p>Skipped, with the reason, without CUDA, with fewer than two devices, or where devices 0 and 1 are not peers.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class PeerGroupGpuTest {

  static final String TIMING = "ALLREDUCE-TIME";
  private static final int REPS = 50;
  private static final int WARMUP = 5;

  /** The contexts, streams and group of one driver's ranks, closed in order. */
  private static final class Ranks implements AutoCloseable {
    final GpuDriver driver;
    final List<GpuContext> contexts = new ArrayList<>();
    final List<GpuStream> streams = new ArrayList<>();
    final PeerGroup group;

    Ranks(GpuDriver driver, int ranks) {
      this.driver = driver;
      try {
        for (int r = 0; r < ranks; r++) {
          GpuContext c = driver.createContext(r);
          contexts.add(c);
          streams.add(c.createStream());
        }
        group = PeerGroup.open(streams);
      } catch (RuntimeException e) {
        closeStreams();
        throw e;
      }
    }

    private void closeStreams() {
      streams.forEach(GpuStream::close);
      contexts.forEach(GpuContext::close);
    }

    @Override
    public void close() {
      try {
        group.close();
      } finally {
        closeStreams();
      }
    }
  }

  private CudaDriver cudaDriver;
  private SimDriver simDriver;
  private Ranks cuda;
  private Ranks sim;
  /** Why the GPUs cannot hold a group; null when they can. */
  private String unusable;

  @BeforeAll
  void open() {
    DriverAvailability a = CudaDriver.availability();
    if (!a.available()) {
      unusable = "no usable GPU: " + a.unavailabilityCause();
      return;
    }
    cudaDriver = CudaDriver.open();
    int visible = cudaDriver.devices().size();
    if (visible < 2) {
      unusable = visible + " CUDA device visible: a peer group needs two";
      return;
    }
    // The most ranks, up to the kernels' limit, whose devices are all peers of each other.
    int ranks = Math.min(visible, CollectiveKernels.MAX_RANKS);
    String why = PeerGroup.whyUnusable(cudaDriver, ordinals(ranks));
    while (why != null && ranks > 2) {
      ranks--;
      why = PeerGroup.whyUnusable(cudaDriver, ordinals(ranks));
    }
    if (why != null) {
      unusable = why;
      return;
    }
    cuda = new Ranks(cudaDriver, ranks);
    simDriver = SimDriver.open(new SimOptions().setDeviceCount(ranks));
    sim = new Ranks(simDriver, ranks);
    System.out.println("PeerGroupGpuTest: " + ranks + " ranks on " + cudaDriver.devices().subList(0, ranks)
        + " of " + visible + " visible");
  }

  @BeforeEach
  void needsPeerGpus() {
    Assumptions.assumeTrue(unusable == null, () -> unusable);
  }

  @AfterAll
  void close() {
    if (cuda != null) {
      cuda.close();
    }
    if (sim != null) {
      sim.close();
    }
    if (cudaDriver != null) {
      cudaDriver.close();
    }
    if (simDriver != null) {
      simDriver.close();
    }
  }

  private static int[] ordinals(int n) {
    int[] d = new int[n];
    Arrays.setAll(d, i -> i);
    return d;
  }

  /**
   * Lengths: one vector unit; 37 units, a partial block; a little past one full grid of the kernel (1024 blocks of
   * 256 threads of 8 elements), so the grid strides once more; the o or down product's output of a Llama layer of
   * 4096 wide at 8192 tokens (64 MiB of bf16 partials, 128 MiB of fp32 residual per rank).
   */
  @ParameterizedTest(name = "{0} x {1}")
  @CsvSource({"FLOAT32, 8", "FLOAT32, 296", "BFLOAT16, 296", "FLOAT16, 296", "FLOAT32, 2097160",
      "BFLOAT16, 2097160", "FLOAT16, 2097160", "BFLOAT16, 33554432"})
  void everyRankAddsTheRankOrderSumBitForBitAsTheHostAndTheSimTwinDo(PartialType type, int n) {
    int ranks = cuda.group.size();
    SplittableRandom random = new SplittableRandom(n * 31L + type.ordinal());
    // The expected sum in rank order, built as the partials are made, and every rank's own x.
    float[] sum = new float[n];
    ByteBuffer[] partials = new ByteBuffer[ranks];
    ByteBuffer[] xs = new ByteBuffer[ranks];
    for (int r = 0; r < ranks; r++) {
      partials[r] = direct((long) n * type.bytes());
      xs[r] = direct(4L * n);
      for (int i = 0; i < n; i++) {
        float p = encode(type, partials[r], i, (float) (random.nextDouble() * 8 - 4));
        sum[i] = r == 0 ? p : sum[i] + p;
        xs[r].putFloat(4 * i, (float) (random.nextDouble() * 2 - 1));
      }
    }
    List<DeviceBuffer> onCuda = allReduce(cuda, type, n, partials, xs);
    List<DeviceBuffer> onSim = allReduce(sim, type, n, partials, xs);
    try {
      for (int r = 0; r < ranks; r++) {
        float[] expected = new float[n];
        for (int i = 0; i < n; i++) {
          expected[i] = xs[r].getFloat(4 * i) + sum[i];
        }
        float[] got = download(cuda.contexts.get(r), onCuda.get(r).address(), n);
        assertSameBits(expected, got, "GPU rank " + r + " of " + ranks + " against the host's rank-order sum");
        assertSameBits(download(sim.contexts.get(r), onSim.get(r).address(), n), got,
            "GPU rank " + r + " of " + ranks + " against the sim twin");
      }
    } finally {
      onCuda.forEach(DeviceBuffer::close);
      onSim.forEach(DeviceBuffer::close);
    }
  }

  /** Each rank's x after {@code x += sum of partials}; the partial buffers are freed, the x buffers the caller's. */
  private static List<DeviceBuffer> allReduce(Ranks ranks, PartialType type, int n, ByteBuffer[] partials,
      ByteBuffer[] xs) {
    List<DeviceBuffer> out = new ArrayList<>();
    try (PeerBuffer p = ranks.group.allocate("partial", (long) n * type.bytes())) {
      for (int r = 0; r < ranks.group.size(); r++) {
        ranks.contexts.get(r).copyHostToDevice(p.address(r), partials[r].duplicate());
        DeviceBuffer x = ranks.contexts.get(r).allocate(4L * n);
        out.add(x);
        x.copyFromHost(xs[r].duplicate());
      }
      ranks.group.run(rank -> ranks.group.allReduceAdd(rank, p, out.get(rank).address(), n, type));
      ranks.group.synchronize();
      return out;
    } catch (RuntimeException e) {
      out.forEach(DeviceBuffer::close);
      throw e;
    }
  }

  /** Uneven slices (V not a multiple of the ranks), one row as at decode and 16 as a prefill's last rows. */
  @ParameterizedTest(name = "{0} x {1}")
  @CsvSource({"1, 32001", "16, 128256", "3, 151937"})
  void everyRankGathersTheWholeVocabularyBitForBit(int rows, int columns) {
    int ranks = cuda.group.size();
    SplittableRandom random = new SplittableRandom(rows * 7919L + columns);
    float[] whole = new float[rows * columns];
    for (int i = 0; i < whole.length; i++) {
      whole[i] = (float) (random.nextDouble() * 40 - 20);
    }
    ByteBuffer[] slices = new ByteBuffer[ranks];
    int widest = 0;
    for (int r = 0; r < ranks; r++) {
      int start = CollectiveKernels.sliceStart(columns, r, ranks);
      int width = CollectiveKernels.sliceStart(columns, r + 1, ranks) - start;
      widest = Math.max(widest, width);
      slices[r] = direct(4L * rows * width);
      for (int m = 0; m < rows; m++) {
        for (int j = 0; j < width; j++) {
          slices[r].putFloat(4 * (m * width + j), whole[m * columns + start + j]);
        }
      }
    }
    long bytes = 4L * rows * widest;
    List<DeviceBuffer> onCuda = gather(cuda, slices, bytes, rows, columns);
    List<DeviceBuffer> onSim = gather(sim, slices, bytes, rows, columns);
    try {
      for (int r = 0; r < ranks; r++) {
        float[] got = download(cuda.contexts.get(r), onCuda.get(r).address(), whole.length);
        assertSameBits(whole, got, "GPU rank " + r + " of " + ranks + " against the whole matrix");
        assertSameBits(download(sim.contexts.get(r), onSim.get(r).address(), whole.length), got,
            "GPU rank " + r + " of " + ranks + " against the sim twin");
      }
    } finally {
      onCuda.forEach(DeviceBuffer::close);
      onSim.forEach(DeviceBuffer::close);
    }
  }

  private static List<DeviceBuffer> gather(Ranks ranks, ByteBuffer[] slices, long bytes, int rows, int columns) {
    List<DeviceBuffer> out = new ArrayList<>();
    try (PeerBuffer p = ranks.group.allocate("slices", bytes)) {
      for (int r = 0; r < ranks.group.size(); r++) {
        ranks.contexts.get(r).copyHostToDevice(p.address(r), slices[r].duplicate());
        out.add(ranks.contexts.get(r).allocate(4L * rows * columns));
      }
      ranks.group.run(rank -> ranks.group.allGatherColumns(rank, p, out.get(rank).address(), rows, columns));
      ranks.group.synchronize();
      return out;
    } catch (RuntimeException e) {
      out.forEach(DeviceBuffer::close);
      throw e;
    }
  }

  @Test
  void aLengthOffTheVectorUnitIsRefusedAndTheGroupRunsOn() {
    int n = 8 * 37 + 3;
    try (PeerBuffer p = cuda.group.allocate("partial", 4L * n)) {
      List<DeviceBuffer> xs = new ArrayList<>();
      try {
        for (int r = 0; r < cuda.group.size(); r++) {
          xs.add(cuda.contexts.get(r).allocate(4L * n));
          cuda.contexts.get(r).memsetD32(xs.get(r).address(), 0, n);
          cuda.contexts.get(r).memsetD32(p.address(r), Float.floatToIntBits(r + 1f), n);
        }
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> cuda.group.run(
            rank -> cuda.group.allReduceAdd(rank, p, xs.get(rank).address(), n, PartialType.FLOAT32)));
        assertTrue(e.getMessage().contains("multiple of " + CollectiveKernels.ALL_REDUCE_UNIT), e.getMessage());
        int whole = n - 3;
        cuda.group.run(rank -> cuda.group.allReduceAdd(rank, p, xs.get(rank).address(), whole,
            PartialType.FLOAT32));
        cuda.group.synchronize();
        float expected = cuda.group.size() * (cuda.group.size() + 1) / 2f;
        for (int r = 0; r < cuda.group.size(); r++) {
          float[] got = download(cuda.contexts.get(r), xs.get(r).address(), n);
          for (int i = 0; i < n; i++) {
            assertEquals(i < whole ? expected : 0f, got[i], "rank " + r + ", element " + i);
          }
        }
      } finally {
        xs.forEach(DeviceBuffer::close);
      }
    }
  }

  /**
   * Prints the median all-reduce time of bf16 partials at 16 KiB, 1 MiB and 64 MiB (and fp32 at 64 MiB) two ways:
   * on the GPU, CUDA events around each of {@value #REPS} back-to-back exchanges of one run (the slowest rank's
   * interval, which includes waiting for the peers); and host to host, one run plus synchronize per exchange. The
   * bandwidths: algbw = partial bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests' all-reduce convention), and
   * what each rank reads from its peers, (n-1) * bytes / time. Nothing is asserted of them.
   */
  @Test
  void allReduceTimes() {
    for (long bytes : new long[] {16L << 10, 1L << 20, 64L << 20}) {
      time(PartialType.BFLOAT16, bytes);
    }
    time(PartialType.FLOAT32, 64L << 20);
  }

  private void time(PartialType type, long bytes) {
    PeerGroup group = cuda.group;
    int ranks = group.size();
    long n = bytes / type.bytes();
    GpuEvent[][] starts = new GpuEvent[ranks][REPS];
    GpuEvent[][] ends = new GpuEvent[ranks][REPS];
    List<DeviceBuffer> xs = new ArrayList<>();
    try (PeerBuffer p = group.allocate("partial", bytes)) {
      for (int r = 0; r < ranks; r++) {
        GpuContext c = cuda.contexts.get(r);
        DeviceBuffer x = c.allocate(4 * n);
        xs.add(x);
        c.memsetD32(x.address(), 0, n);
        c.memsetD8(p.address(r), (byte) 0, bytes);
        for (int k = 0; k < REPS; k++) {
          starts[r][k] = c.createEvent(true);
          ends[r][k] = c.createEvent(true);
        }
      }
      IntFunction<PeerGroup.RankWork> exchanges = count -> rank -> {
        for (int k = 0; k < count; k++) {
          group.allReduceAdd(rank, p, xs.get(rank).address(), n, type);
        }
      };
      group.run(exchanges.apply(WARMUP));
      group.synchronize();
      double[] hostMillis = new double[REPS];
      for (int k = 0; k < REPS; k++) {
        long t0 = System.nanoTime();
        group.run(exchanges.apply(1));
        group.synchronize();
        hostMillis[k] = (System.nanoTime() - t0) / 1e6;
      }
      group.run(rank -> {
        GpuStream s = group.stream(rank);
        for (int k = 0; k < REPS; k++) {
          starts[rank][k].record(s);
          group.allReduceAdd(rank, p, xs.get(rank).address(), n, type);
          ends[rank][k].record(s);
        }
      });
      group.synchronize();
      double[] gpuMillis = new double[REPS];
      for (int k = 0; k < REPS; k++) {
        for (int r = 0; r < ranks; r++) {
          gpuMillis[k] = Math.max(gpuMillis[k], ends[r][k].elapsedMillisSince(starts[r][k]));
        }
      }
      double gpu = median(gpuMillis);
      double host = median(hostMillis);
      double algbw = bytes / (gpu * 1e6);
      System.out.println(String.format(Locale.ROOT,
          "%s %s ranks=%d bytes=%d (%s): median %.4f ms on the GPU (events), %.4f ms host to host "
              + "(run + synchronize); algbw %.1f GB/s, busbw %.1f GB/s, peer reads %.1f GB/s per rank",
          TIMING, type, ranks, bytes, size(bytes), gpu, host, algbw, algbw * 2 * (ranks - 1) / ranks,
          algbw * (ranks - 1)));
    } finally {
      group.synchronize();
      xs.forEach(DeviceBuffer::close);
      for (int r = 0; r < ranks; r++) {
        for (int k = 0; k < REPS; k++) {
          if (starts[r][k] != null) {
            starts[r][k].close();
          }
          if (ends[r][k] != null) {
            ends[r][k].close();
          }
        }
      }
    }
  }

  private static String size(long bytes) {
    return bytes >= 1L << 20 ? (bytes >> 20) + " MiB" : (bytes >> 10) + " KiB";
  }

  private static double median(double[] v) {
    double[] s = v.clone();
    Arrays.sort(s);
    return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  }

  /** Writes {@code v} rounded to {@code type} at element {@code i}; returns the value written. */
  private static float encode(PartialType type, ByteBuffer b, int i, float v) {
    switch (type) {
      case FLOAT32 -> {
        b.putFloat(4 * i, v);
        return v;
      }
      case BFLOAT16 -> {
        short h = HalfType.BF16.fromFloat(v);
        b.putShort(2 * i, h);
        return HalfType.BF16.toFloat(h);
      }
      default -> {
        short h = HalfType.FP16.fromFloat(v);
        b.putShort(2 * i, h);
        return HalfType.FP16.toFloat(h);
      }
    }
  }

  private static void assertSameBits(float[] expected, float[] got, String what) {
    assertEquals(expected.length, got.length, what);
    int differ = 0;
    int first = -1;
    for (int i = 0; i < expected.length; i++) {
      if (Float.floatToRawIntBits(expected[i]) != Float.floatToRawIntBits(got[i])) {
        if (first < 0) {
          first = i;
        }
        differ++;
      }
    }
    if (differ > 0) {
      fail(what + ": " + differ + " of " + expected.length + " elements differ, the first at " + first + ": expected "
          + expected[first] + ", got " + got[first]);
    }
  }

  private static ByteBuffer direct(long bytes) {
    return ByteBuffer.allocateDirect(Math.toIntExact(bytes)).order(ByteOrder.LITTLE_ENDIAN);
  }

  private static float[] download(GpuContext context, long address, int n) {
    ByteBuffer b = direct(4L * n);
    context.copyDeviceToHost(b, address);
    float[] out = new float[n];
    b.asFloatBuffer().get(out);
    return out;
  }
}
