package dev.thaw.bench;

import dev.thaw.runtime.check.CheckKernels;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelArgs;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OperationsPerInvocation;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * What a kernel launch costs through {@code Kernel.launch}, on the driver {@link GpuDrivers#open()} picks
 * (CUDA on a GPU host; the simulated device elsewhere, whose numbers are not GPU numbers).
 *
 * <ul>
 *   <li>{@link #emptyLaunchPrebuiltArgs}: launches per second of {@code thaw_empty} through the hot path, a
 *       {@link KernelArgs} built once; the floor, raw JNA, is in {@code docs/benchmarks/launch.md}.
 *   <li>{@link #saxpyLaunchPrebuiltArgs} / {@link #saxpyLaunchVarargs}: the same kernel and values through
 *       the hot path and through {@code launch(grid, block, stream, Object...)}; the difference is the cost
 *       of boxing and marshalling four typed arguments per launch.
 *   <li>{@link #emptyLaunchAndSynchronize}: one launch plus {@code cuStreamSynchronize}, the round trip a
 *       dependent host step waits for.
 * </ul>
 *
 * <p>The throughput benchmarks launch {@value #BATCH} kernels and then synchronize the stream, so the
 * launch queue never grows without bound and each batch's GPU work is inside the measurement.
 */
@State(Scope.Thread)
@Fork(value = 1, jvmArgsAppend = {"-Xms1g", "-Xmx1g"})
@Warmup(iterations = 3, time = 2)
@Measurement(iterations = 5, time = 2)
public class LaunchBenchmark {

  /** Launches between stream synchronizations in the throughput benchmarks. */
  static final int BATCH = 1024;

  /** saxpy over one block: the kernel does next to nothing, so the launch path dominates. */
  private static final int SAXPY_ELEMENTS = 256;

  private static final Dim3 ONE = Dim3.of(1);
  private static final Dim3 BLOCK = Dim3.of(SAXPY_ELEMENTS);

  private GpuDriver driver;
  private GpuContext context;
  private GpuModule module;
  private GpuStream stream;
  private DeviceBuffer x;
  private DeviceBuffer y;
  private Kernel empty;
  private Kernel saxpy;
  private KernelArgs emptyArgs;
  private KernelArgs saxpyArgs;

  @Setup(Level.Trial)
  public void open() {
    driver = GpuDrivers.open();
    if (driver.isSimulated()) {
      System.err.println("LaunchBenchmark: SIMULATED device: timings are not GPU timings");
    }
    context = driver.createContext(0);
    System.err.println("LaunchBenchmark: " + driver.name() + " driver, " + context.device().describe());
    module = context.loadPtx(CheckKernels.ptx());
    empty = module.kernel(CheckKernels.EMPTY);
    saxpy = module.kernel(CheckKernels.SAXPY);
    stream = context.createStream();
    x = context.allocate(4L * SAXPY_ELEMENTS);
    y = context.allocate(4L * SAXPY_ELEMENTS);
    emptyArgs = empty.newArgs();
    saxpyArgs = saxpy.newArgs().set(0, 0.5f).set(1, x).set(2, y).set(3, SAXPY_ELEMENTS);
  }

  @TearDown(Level.Trial)
  public void close() {
    // Reverse order of creation; each close is idempotent and a null means setup stopped early.
    closeQuietly(y);
    closeQuietly(x);
    closeQuietly(stream);
    closeQuietly(module);
    closeQuietly(context);
    closeQuietly(driver);
  }

  private static void closeQuietly(AutoCloseable c) {
    if (c == null) {
      return;
    }
    try {
      c.close();
    } catch (Exception e) {
      System.err.println("LaunchBenchmark: close failed: " + e);
    }
  }

  /** (a) Hot path: {@code thaw_empty}, pre-built arguments. Score: launches per second. */
  @Benchmark
  @BenchmarkMode(Mode.Throughput)
  @OutputTimeUnit(TimeUnit.SECONDS)
  @OperationsPerInvocation(BATCH)
  public void emptyLaunchPrebuiltArgs() {
    for (int i = 0; i < BATCH; i++) {
      empty.launch(ONE, ONE, 0, stream, emptyArgs);
    }
    stream.synchronize();
  }

  /** Hot path with saxpy's four arguments, the baseline for {@link #saxpyLaunchVarargs}. */
  @Benchmark
  @BenchmarkMode(Mode.Throughput)
  @OutputTimeUnit(TimeUnit.SECONDS)
  @OperationsPerInvocation(BATCH)
  public void saxpyLaunchPrebuiltArgs() {
    for (int i = 0; i < BATCH; i++) {
      saxpy.launch(ONE, BLOCK, 0, stream, saxpyArgs);
    }
    stream.synchronize();
  }

  /** (b) Varargs path: {@code launch(grid, block, stream, 0.5f, x, y, n)}, marshalled per launch. */
  @Benchmark
  @BenchmarkMode(Mode.Throughput)
  @OutputTimeUnit(TimeUnit.SECONDS)
  @OperationsPerInvocation(BATCH)
  public void saxpyLaunchVarargs() {
    for (int i = 0; i < BATCH; i++) {
      saxpy.launch(ONE, BLOCK, stream, 0.5f, x, y, SAXPY_ELEMENTS);
    }
    stream.synchronize();
  }

  /** (c) Latency: one {@code thaw_empty} launch and a stream synchronize. Score: µs per round trip. */
  @Benchmark
  @BenchmarkMode(Mode.AverageTime)
  @OutputTimeUnit(TimeUnit.MICROSECONDS)
  public void emptyLaunchAndSynchronize() {
    empty.launch(ONE, ONE, 0, stream, emptyArgs);
    stream.synchronize();
  }
}
