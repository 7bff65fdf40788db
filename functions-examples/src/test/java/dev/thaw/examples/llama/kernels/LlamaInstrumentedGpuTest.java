package dev.thaw.examples.llama.kernels;

import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.examples.function.CudaAndSim;
import dev.thaw.examples.function.GuardedLaunches;
import dev.thaw.examples.llama.kernels.LlamaKernels.Epilogue;
import dev.thaw.examples.llama.kernels.LlamaKernels.GemmTile;
import dev.thaw.examples.transformer.KernelOutput;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import dev.thaw.runtime.ptx.instrument.DeviceGuard;
import dev.thaw.runtime.ptx.instrument.GuardedModule;
import dev.thaw.runtime.ptx.instrument.PtxInstrumenter;
import dev.thaw.runtime.ptx.instrument.ViolationReport;
import java.util.List;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The Llama kernels instrumented, on a GPU: every {@link LlamaKernelsGpuTest} case, with each buffer of the case
 * allowed (its real arguments), must report no violation and compute the plain kernels' bits — cp.async sources
 * checked, zero-filling copies of rows past M or N not. Also prints the instrumentation overhead on the 8B's
 * shapes. Skipped, with the reason, where no GPU is usable.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class LlamaInstrumentedGpuTest {

  private CudaDriver driver;
  private LlamaDevice plain;
  private LlamaDevice guarded;
  private GuardedLaunches guards;

  @BeforeAll
  void open() {
    if (!CudaDriver.availability().available()) {
      return;
    }
    driver = CudaDriver.open();
    plain = new LlamaDevice(driver);
    // The module this GPU runs: the sm_90a build, wgmma products included, on an H100/H200.
    guards = new GuardedLaunches(PtxInstrumenter.instrument(LlamaKernels.ptx(driver.devices().get(0))),
        () -> guarded.buffers());
    guarded = new LlamaDevice(driver, (context, type) -> new LlamaKernels(guards.load(context), type));
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

  static Stream<LlamaCases.Case> cases() {
    return LlamaKernelsGpuTest.cases();
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("cases")
  void instrumentedKernelsReportNothingAndComputeTheSameBits(LlamaCases.Case c) {
    Assumptions.assumeTrue(!c.wgmma() || guarded.kernels(HalfType.BF16).wgmma(),
        () -> c.name + ": wgmma runs on compute capability 9.0 only; this GPU is " + plain.context.device().smArch());
    List<KernelOutput> expected = c.run(plain);
    List<KernelOutput> got = guards.assertClean(c.name, () -> c.run(guarded));
    KernelOutput.assertSameBits(c.name, expected, got);
  }

  /**
   * Plain vs instrumented (one guard for all launches) on the 8B's gate|up product (the mma.sync tile, and the
   * largest wgmma one where the GPU has it) and a 2000-token prefill.
   */
  @Test
  void instrumentationOverheadOnLlama8bShapes() {
    int m = 2000;
    int k = 4096;
    int n = 2 * 14336;
    int hq = 32;
    int hkv = 8;
    int d = 128;
    Random rnd = new Random(11);
    HalfType bf = HalfType.BF16;
    short[] x = LlamaCases.random(bf, rnd, m * k, 1);
    short[] w = LlamaCases.random(bf, rnd, n * k, 0.02);
    short[] qkv = LlamaCases.random(bf, rnd, m * (hq + 2 * hkv) * d, 1);
    short[] cache = LlamaCases.random(bf, rnd, hkv * m * d, 1);
    int[][] rp = LlamaCases.prompts(new int[] {m}, new int[] {0});
    float scale = (float) (1 / Math.sqrt(d));
    long[] p = uploads(plain, x, w, qkv, cache, rp, m, n, hq, d);
    long[] q = uploads(guarded, x, w, qkv, cache, rp, m, n, hq, d);
    try (DeviceGuard guard = DeviceGuard.upload(guarded.context, guards.allBuffers());
        GuardedModule fixed = GuardedModule.withGuard(guards.module(), guard)) {
      LlamaKernels ik = new LlamaKernels(fixed, bf);
      LlamaKernels pk = plain.kernels(bf);
      double pg = plain.medianMs(s -> pk.gemm(s, GemmTile.LARGE, p[0], p[1], 0, p[2], m, n, k, Epilogue.SWIGLU));
      double ig = guarded.medianMs(s -> ik.gemm(s, GemmTile.LARGE, q[0], q[1], 0, q[2], m, n, k, Epilogue.SWIGLU));
      String wg = "";
      if (pk.wgmma() && ik.wgmma()) {
        GemmTile t = GemmTile.WGMMA_LARGE;
        double pw = plain.medianMs(s -> pk.gemm(s, t, p[0], p[1], 0, p[2], m, n, k, Epilogue.SWIGLU));
        double iw = guarded.medianMs(s -> ik.gemm(s, t, q[0], q[1], 0, q[2], m, n, k, Epilogue.SWIGLU));
        wg = String.format("; %s SwiGLU plain %.3f ms, instrumented %.3f ms (%.2fx)", t.entry(), pw, iw, iw / pw);
      }
      double pa = plain.medianMs(s -> pk.flashAttention(s, p[3], p[4], p[5], p[6], p[7], p[8], m, hq, hkv, d, m,
          scale));
      double ia = guarded.medianMs(s -> ik.flashAttention(s, q[3], q[4], q[5], q[6], q[7], q[8], m, hq, hkv, d, m,
          scale));
      guarded.stream.synchronize();
      ViolationReport r = guard.read();
      System.out.printf("instrumentation overhead [%s]: llama_gemm_128x128 SwiGLU M=%d N=%d K=%d plain %.3f ms, "
          + "instrumented %.3f ms (%.2fx)%s; llama_flash_attention %d tokens 32/8 heads D=128 plain %.3f ms, "
          + "instrumented %.3f ms (%.2fx); median of 20, CUDA events%n", plain.context.device().name(), m, n, k, pg,
          ig, ig / pg, wg, m, pa, ia, ia / pa);
      assertTrue(r.clean(), "timing launches reported violations: " + r.recorded());
    }
  }

  /** X, W, gate|up out, qkv, k cache, v cache, attention out, positions, cache rows. */
  private static long[] uploads(LlamaDevice dev, short[] x, short[] w, short[] qkv, short[] cache, int[][] rp, int m,
      int n, int hq, int d) {
    return new long[] {dev.upload(x), dev.upload(w), dev.upload(new short[m * n / 2]), dev.upload(qkv),
        dev.upload(cache), dev.upload(cache), dev.upload(new short[m * hq * d]), dev.upload(rp[1]),
        dev.upload(rp[0])};
  }
}
