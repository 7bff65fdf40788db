package dev.thaw.runtime.check;

import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.PinnedBuffer;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;

/**
 * An end-to-end check of a {@link GpuDriver} on one device, through the same API the restore path uses:
 * context creation, PTX JIT and cubin load of the bundled {@link CheckKernels}, VMM allocation, pinned
 * asynchronous copies timed by stream events, a verified {@code saxpy} and {@code fill_u32}, and the cost of
 * an empty launch.
 *
 * <p>Results are verified exactly: saxpy against {@link CheckKernels#saxpy} bit for bit (the GPU's fused
 * multiply-add rounds once, as {@link Math#fma} does), the fill word for word, including the word just past
 * its end, which must stay untouched.
 *
 * <p>It prints nothing and throws nothing a driver or a wrong result causes: those become a failed
 * {@link DeviceCheckResult} that names the phase. Everything it creates is closed before it returns.
 */
public final class DeviceCheck {

  private static final int BLOCK = 256;
  /** Grid-stride kernels cover any n with this many blocks at most; more only costs the sim time. */
  private static final int MAX_GRID = 1 << 16;
  private static final float SAXPY_A = 2.5f;
  private static final int FILL_VALUE = 0xA5A55A5A;
  private static final int WARM_UP_LAUNCHES = 100;

  private DeviceCheck() {}

  /** Checks device 0 with the default options. */
  public static DeviceCheckResult run(GpuDriver driver) {
    return run(driver, new DeviceCheckOptions());
  }

  public static DeviceCheckResult run(GpuDriver driver, DeviceCheckOptions options) {
    Recorder r = new Recorder(driver);
    try {
      check(driver, options, r);
    } catch (CheckFailure e) {
      r.fail(e.getMessage());
    } catch (RuntimeException | LinkageError e) {
      // A driver error (CudaException keeps call, code and name in its message) or a broken driver binding.
      r.fail(describe(e));
    }
    return r.result();
  }

  private static void check(GpuDriver driver, DeviceCheckOptions options, Recorder r) {
    int n = options.elements();
    long bytes = 4L * n;
    Dim3 block = Dim3.of(BLOCK);
    Dim3 grid = Dim3.of((int) Math.min(MAX_GRID, (n + BLOCK - 1L) / BLOCK));

    r.begin("create context");
    try (GpuContext context = driver.createContext(options.deviceOrdinal())) {
      r.device = context.device().describe();
      r.end("");

      r.begin("load PTX (JIT)");
      try (GpuModule module = context.loadPtx(CheckKernels.ptx())) {
        Kernel empty = module.kernel(CheckKernels.EMPTY);
        Kernel saxpy = module.kernel(CheckKernels.SAXPY);
        Kernel fill = module.kernel(CheckKernels.FILL_U32);
        byte[] cubin = module.cubin();
        r.cubinBytes = cubin.length;
        r.jitMillis = r.end(String.format(Locale.ROOT, "cubin %,d bytes", cubin.length));

        r.begin("load cubin");
        try (GpuModule reloaded = context.loadCubin(cubin)) {
          reloaded.kernel(CheckKernels.EMPTY);
          reloaded.kernel(CheckKernels.SAXPY);
          reloaded.kernel(CheckKernels.FILL_U32);
          r.cubinLoadMillis = r.end("3 kernels found");
        }

        r.begin("allocate device memory (VMM)");
        try (DeviceBuffer x = context.allocate(bytes);
            DeviceBuffer y = context.allocate(bytes)) {
          r.end(String.format(Locale.ROOT, "2 x %s: x at 0x%x, y at 0x%x", size(bytes), x.address(), y.address()));

          r.begin("allocate pinned host memory");
          try (PinnedBuffer hostX = context.allocatePinned(bytes);
              PinnedBuffer hostY = context.allocatePinned(bytes);
              PinnedBuffer hostOut = context.allocatePinned(bytes);
              GpuStream stream = context.createStream();
              GpuEvent start = context.createEvent();
              GpuEvent stop = context.createEvent()) {
            FloatBuffer xs = hostX.asByteBuffer().asFloatBuffer();
            FloatBuffer ys = hostY.asByteBuffer().asFloatBuffer();
            FloatBuffer out = hostOut.asByteBuffer().asFloatBuffer();
            r.end("3 x " + size(bytes));

            r.begin("fill inputs");
            SplittableRandom random = new SplittableRandom(options.seed());
            for (int i = 0; i < n; i++) {
              xs.put(i, (float) (random.nextDouble() * 2 - 1));
              ys.put(i, (float) (random.nextDouble() * 2 - 1));
            }
            r.end(String.format(Locale.ROOT, "%,d x, y pairs, seed %d", n, options.seed()));

            r.begin("copy host -> device");
            stream.record(start);
            stream.copyHostToDeviceAsync(x.address(), hostX, 0, bytes);
            stream.copyHostToDeviceAsync(y.address(), hostY, 0, bytes);
            stream.record(stop);
            stop.synchronize();
            r.hostToDeviceGBps = gbps(2 * bytes, stop.elapsedMillisSince(start));
            r.end(bandwidth(2 * bytes, r.hostToDeviceGBps));

            r.begin("saxpy");
            saxpy.launch(grid, block, stream, SAXPY_A, x, y, n);
            stream.synchronize();
            r.end(String.format(Locale.ROOT, "grid %d x block %d", grid.x(), block.x()));

            r.begin("copy device -> host");
            stream.record(start);
            stream.copyDeviceToHostAsync(hostOut, 0, y.address(), bytes);
            stream.record(stop);
            stop.synchronize();
            r.deviceToHostGBps = gbps(bytes, stop.elapsedMillisSince(start));
            r.end(bandwidth(bytes, r.deviceToHostGBps));

            r.begin("verify saxpy");
            verifySaxpy(xs, ys, out, n, options.seed());
            r.end(String.format(Locale.ROOT, "%,d elements bit-exact", n));

            r.begin("fill_u32");
            // Zero the whole buffer, then fill all but the last word: the last must stay 0 (bounds respected).
            stream.memsetD32Async(y.address(), 0, n);
            fill.launch(grid, block, stream, y, FILL_VALUE, n - 1);
            stream.copyDeviceToHostAsync(hostOut, 0, y.address(), bytes);
            stream.synchronize();
            verifyFill(hostOut.asByteBuffer().asIntBuffer(), n);
            r.end(String.format(Locale.ROOT, "%,d words set, the next untouched", n - 1));

            int launches = options.emptyLaunches();
            r.begin(String.format(Locale.ROOT, "empty launch x %,d", launches));
            KernelArgs none = empty.newArgs();
            Dim3 one = Dim3.of(1);
            for (int i = 0; i < WARM_UP_LAUNCHES; i++) {
              empty.launch(one, one, 0, stream, none);
            }
            stream.synchronize();
            long t0 = System.nanoTime();
            for (int i = 0; i < launches; i++) {
              empty.launch(one, one, 0, stream, none);
            }
            stream.synchronize();
            long elapsed = System.nanoTime() - t0;
            r.emptyLaunchMicros = elapsed / 1e3 / launches;
            r.endWithMillis(elapsed / 1e6, String.format(Locale.ROOT, "%.2f us/launch", r.emptyLaunchMicros));

            // Closing can report an asynchronous error too; it belongs to the check.
            r.begin("release");
          }
        }
      }
    }
    r.end("");
  }

  private static void verifySaxpy(FloatBuffer xs, FloatBuffer ys, FloatBuffer out, int n, long seed) {
    int mismatches = 0;
    int first = -1;
    for (int i = 0; i < n; i++) {
      float expected = CheckKernels.saxpy(SAXPY_A, xs.get(i), ys.get(i));
      if (Float.floatToRawIntBits(out.get(i)) != Float.floatToRawIntBits(expected)) {
        if (mismatches++ == 0) {
          first = i;
        }
      }
    }
    if (mismatches > 0) {
      float expected = CheckKernels.saxpy(SAXPY_A, xs.get(first), ys.get(first));
      throw new CheckFailure(String.format(Locale.ROOT,
          "y[%d] = %s, expected fma(%s, %s, %s) = %s; %,d of %,d elements differ (seed %d)",
          first, out.get(first), SAXPY_A, xs.get(first), ys.get(first), expected, mismatches, n, seed));
    }
  }

  private static void verifyFill(IntBuffer words, int n) {
    for (int i = 0; i < n - 1; i++) {
      if (words.get(i) != FILL_VALUE) {
        throw new CheckFailure(String.format(Locale.ROOT, "p[%d] = 0x%08x, expected 0x%08x", i, words.get(i),
            FILL_VALUE));
      }
    }
    if (words.get(n - 1) != 0) {
      throw new CheckFailure(String.format(Locale.ROOT,
          "p[%d] = 0x%08x past the end of the fill (n = %d), expected it untouched (0)", n - 1, words.get(n - 1),
          n - 1));
    }
  }

  /** 10^9 bytes a second; NaN when the events could not resolve the time. */
  private static double gbps(long bytes, float millis) {
    return millis > 0 ? bytes / (millis * 1e6) : Double.NaN;
  }

  private static String bandwidth(long bytes, double gbps) {
    return Double.isNaN(gbps)
        ? size(bytes) + ", too fast for the events to time"
        : String.format(Locale.ROOT, "%s at %.1f GB/s", size(bytes), gbps);
  }

  private static String size(long bytes) {
    return bytes % (1 << 20) == 0
        ? (bytes >> 20) + " MiB"
        : String.format(Locale.ROOT, "%,d bytes", bytes);
  }

  private static String describe(Throwable e) {
    if (e instanceof CudaException || e.getMessage() == null) {
      return e.getMessage() == null ? e.getClass().getSimpleName() : e.getMessage();
    }
    return e.getClass().getSimpleName() + ": " + e.getMessage();
  }

  /** A result that is wrong: the device answered, but not what it should have. */
  private static final class CheckFailure extends RuntimeException {
    CheckFailure(String message) {
      super(message, null, false, false);
    }
  }

  /** Collects phases and figures as the check runs, so a failure still reports what was measured. */
  private static final class Recorder {
    private final GpuDriver driver;
    private final List<DeviceCheckResult.Phase> phases = new ArrayList<>();
    private String phase;
    private long phaseStart;
    private String failure;
    String device = "";
    double jitMillis = Double.NaN;
    long cubinBytes = -1;
    double cubinLoadMillis = Double.NaN;
    double hostToDeviceGBps = Double.NaN;
    double deviceToHostGBps = Double.NaN;
    double emptyLaunchMicros = Double.NaN;

    Recorder(GpuDriver driver) {
      this.driver = driver;
    }

    void begin(String name) {
      phase = name;
      phaseStart = System.nanoTime();
    }

    double end(String detail) {
      return endWithMillis((System.nanoTime() - phaseStart) / 1e6, detail);
    }

    double endWithMillis(double millis, String detail) {
      phases.add(new DeviceCheckResult.Phase(phase, millis, detail));
      phase = null;
      return millis;
    }

    void fail(String reason) {
      failure = phase == null ? reason : phase + ": " + reason;
    }

    DeviceCheckResult result() {
      return new DeviceCheckResult(driver.name(), driver.isSimulated(), driver.driverVersion(), device, phases,
          failure == null, failure, jitMillis, cubinBytes, cubinLoadMillis, hostToDeviceGBps, deviceToHostGBps,
          emptyLaunchMicros);
    }
  }
}
