package dev.thaw.examples.gpt2.kernels;

import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.examples.function.CudaAndSim;
import dev.thaw.examples.function.GuardedLaunches;
import dev.thaw.examples.transformer.KernelOutput;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import dev.thaw.runtime.ptx.instrument.DeviceGuard;
import dev.thaw.runtime.ptx.instrument.GuardedModule;
import dev.thaw.runtime.ptx.instrument.PtxInstrumenter;
import dev.thaw.runtime.ptx.instrument.ViolationReport;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The 8 GPT-2 kernels instrumented, on a GPU: with every buffer of the case allowed (its real arguments),
 * each launch must report no violation and produce the plain kernels' bits. Also times plain vs instrumented
 * on GPT-2-large shapes. Skipped, with the reason, where no GPU is usable.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class Gpt2InstrumentedGpuTest {

  private CudaDriver driver;
  private Gpt2Device plain;
  private Gpt2Device guarded;
  private GuardedLaunches guards;

  @BeforeAll
  void open() {
    if (!CudaDriver.availability().available()) {
      return;
    }
    driver = CudaDriver.open();
    plain = new Gpt2Device(driver);
    guards = new GuardedLaunches(PtxInstrumenter.instrument(Gpt2Kernels.ptx()), () -> guarded.buffers());
    guarded = new Gpt2Device(driver, context -> new Gpt2Kernels(guards.load(context)));
  }

  @BeforeEach
  void needsAGpu() {
    CudaAndSim.assumeGpu();
  }

  @AfterEach
  void free() {
    if (plain != null) {
      plain.freeBuffers();
      guarded.freeBuffers();
    }
  }

  @AfterAll
  void close() {
    if (driver == null) {
      return;
    }
    plain.close();
    guards.close();
    guarded.close();
    driver.close();
  }

  static Stream<Gpt2Cases.Case> cases() {
    return Gpt2KernelsGpuTest.cases();
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("cases")
  void instrumentedKernelsReportNothingAndComputeTheSameBits(Gpt2Cases.Case c) {
    List<KernelOutput> expected = c.run(plain);
    List<KernelOutput> got = guards.assertClean(c.name, () -> c.run(guarded));
    KernelOutput.assertSameBits(c.name, expected, got);
  }

  @Test
  void instrumentationOverheadOnGpt2LargeShapes() {
    Random rnd = new Random(7);
    int m = 16;
    int k = 1280;
    int n = 5120;
    int v = 50257;
    short[] x = Gpt2Cases.randomHalves(rnd, m * k, 1);
    short[] w = Gpt2Cases.randomHalves(rnd, k * n, 0.05);
    short[] bias = Gpt2Cases.randomHalves(rnd, n, 0.1);
    short[] wte = Gpt2Cases.randomHalves(rnd, v * k, 0.05);
    String line = "instrumentation overhead [" + plain.context.device().name() + "]: ";
    try (DeviceGuard guard = prepare(guarded, x, w, bias, wte, m, n, v);
        GuardedModule fixed = GuardedModule.withGuard(guards.module(), guard)) {
      Gpt2Kernels instrumented = new Gpt2Kernels(fixed);
      long[] p = uploads(plain, x, w, bias, wte, m, n, v);
      long[] q = addresses(guarded);
      double pm = plain.medianMs(s -> plain.kernels.matmul(s, p[0], p[1], p[2], p[3], m, n, k, false));
      double im = guarded.medianMs(s -> instrumented.matmul(s, q[0], q[1], q[2], q[3], m, n, k, false));
      double pl = plain.medianMs(s -> plain.kernels.lmHead(s, p[4], p[5], p[6], 1, v, k));
      double il = guarded.medianMs(s -> instrumented.lmHead(s, q[4], q[5], q[6], 1, v, k));
      guarded.stream.synchronize();
      ViolationReport r = guard.read();
      line += String.format("matmul M=%d K=%d N=%d plain %.3f ms, instrumented %.3f ms (%.2fx); "
          + "lm_head M=1 C=%d V=%d plain %.3f ms, instrumented %.3f ms (%.2fx); median of 20, CUDA events",
          m, k, n, pm, im, im / pm, k, v, pl, il, il / pl);
      System.out.println(line);
      assertTrue(r.clean(), "timing launches reported violations: " + r.recorded());
    }
  }

  /** Uploads the timing inputs on the guarded device and a guard allowing all of them. */
  private DeviceGuard prepare(Gpt2Device dev, short[] x, short[] w, short[] bias, short[] wte, int m, int n, int v) {
    uploads(dev, x, w, bias, wte, m, n, v);
    return DeviceGuard.upload(dev.context, guards.allBuffers());
  }

  private static long[] uploads(Gpt2Device dev, short[] x, short[] w, short[] bias, short[] wte, int m, int n, int v) {
    return new long[] {dev.upload(x), dev.upload(w), dev.upload(bias), dev.upload(new short[m * n]),
        dev.upload(Arrays.copyOf(x, 1280)), dev.upload(wte), dev.upload(new float[v])};
  }

  private static long[] addresses(Gpt2Device dev) {
    return dev.buffers().stream().mapToLong(DeviceBuffer::address).toArray();
  }
}
