package dev.thaw.examples.mlp;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.sim.AccessLog;
import dev.thaw.runtime.gpu.sim.AddressRange;
import dev.thaw.runtime.gpu.sim.SimContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimLaunchRecord;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/** The Java twin of mlp_linear: its TF32 rounding, its results, and the exact bytes it touches. */
class MlpSimKernelsTest {

  /** cvt.rna.tf32.f32 rounds ties away from zero, not to even; a carry may reach the exponent, or infinity. */
  @Test
  void roundsToTf32NearestTiesAwayFromZero() {
    assertEquals(1 + 0x1p-10f, MlpSimKernels.tf32(1 + 0x1p-11f));
    assertEquals(-(1 + 0x1p-10f), MlpSimKernels.tf32(-(1 + 0x1p-11f)));
    assertEquals(1f, MlpSimKernels.tf32(1 + 0x1p-11f - 0x1p-23f));
    assertEquals(1 + 0x1p-9f, MlpSimKernels.tf32(1 + 3 * 0x1p-11f));
    assertEquals(2f, MlpSimKernels.tf32(2 - 0x1p-12f));
    assertEquals(Float.POSITIVE_INFINITY, MlpSimKernels.tf32(Float.MAX_VALUE));
    assertEquals(0x1p-126f, MlpSimKernels.tf32(0x1p-126f));
    assertTrue(Float.isNaN(MlpSimKernels.tf32(Float.NaN)));
    Random r = new Random(5);
    for (int i = 0; i < 200_000; i++) {
      float v = Float.intBitsToFloat(r.nextInt());
      if (Float.isFinite(v)) {
        assertEquals(Float.floatToIntBits(LinearRun.tf32(v)), Float.floatToIntBits(MlpSimKernels.tf32(v)),
            () -> "tf32(" + v + ")");
      }
    }
  }

  static Stream<LinearRun> shapes() {
    return Stream.of(new LinearRun(1, 1, 1, false, 1), new LinearRun(3, 17, 5, true, 2),
        new LinearRun(33, 10, 256, false, 3), new LinearRun(130, 65, 70, true, 4), new LinearRun(5, 7, 0, true, 5),
        new LinearRun(64, 64, 32, false, 6));
  }

  /** Whatever the grid, the twin computes every output, as the CUDA kernel's tile stride does. */
  @ParameterizedTest
  @MethodSource("shapes")
  void computesTheTf32ProductForAnyGrid(LinearRun run) {
    try (SimDriver driver = SimDriver.open(new SimOptions()); var ctx = driver.createContext(0)) {
      float[] y = run.run(ctx);
      run.assertMatches("sim", y, 1e-3);
      assertArrayEquals(y, run.run(ctx, Dim3.of(1), Dim3.of(128)));
      assertArrayEquals(y, run.run(ctx, Dim3.of(7, 2), Dim3.of(128)));
    }
  }

  /** Reads exactly x[0, M*K), w[0, K*N) and b[0, N); writes exactly y[0, M*N); any other block touches nothing. */
  @Test
  void touchesExactlyTheBytesTheCudaKernelTouches() {
    int m = 9;
    int n = 70;
    int k = 13;
    try (SimDriver driver = SimDriver.open(new SimOptions()); var ctx = driver.createContext(0);
        FunctionSession s = FunctionSession.record(ctx)) {
      s.loadModule("mlp", MlpFunction.ptx());
      KernelRef kernel = s.kernelRef("mlp", "mlp_linear");
      BufferRef x = s.allocate("x", 4L * m * k + 100);
      BufferRef w = s.allocate("w", 4L * k * n + 100);
      BufferRef b = s.allocate("b", 4L * n + 100);
      BufferRef y = s.allocate("y", 4L * m * n + 100);
      List<SimLaunchRecord> launches = new CopyOnWriteArrayList<>();
      ((SimContext) ctx).addLaunchListener(launches::add);
      s.launch(kernel, Dim3.of(2), Dim3.of(128), x, w, b, y, m, n, k, 1);
      s.launch(kernel, Dim3.of(2), Dim3.of(64), x, w, b, y, m, n, k, 1);
      s.launch(kernel, Dim3.of(2), Dim3.of(128, 2), x, w, b, y, m, n, k, 1);
      s.launch(kernel, Dim3.of(2), Dim3.of(128), x, w, b, y, m, 0, k, 1);
      s.launch(kernel, Dim3.of(2), Dim3.of(128), x, w, b, y, m, n, 0, 0);
      s.synchronize();
      assertEquals(5, launches.size());
      assertEquals(AccessLog.of(AddressRange.of(s.address(x), 4L * m * k), AddressRange.of(s.address(w), 4L * k * n),
          AddressRange.of(s.address(b), 4L * n)), launches.get(0).reads());
      assertEquals(AccessLog.of(AddressRange.of(s.address(y), 4L * m * n)), launches.get(0).writes());
      for (int i = 1; i <= 3; i++) {
        assertTrue(launches.get(i).reads().isEmpty() && launches.get(i).writes().isEmpty(), launches.get(i)::toString);
      }
      assertEquals(AccessLog.of(AddressRange.of(s.address(b), 4L * n)), launches.get(4).reads());
      assertEquals(AccessLog.of(AddressRange.of(s.address(y), 4L * m * n)), launches.get(4).writes());
    }
  }
}
