package dev.thaw.examples.mlp;

import static dev.thaw.examples.mlp.MlpTesting.json;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.runtime.function.AllocationRecord;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.HostStates;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.SessionTable;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The mlp function and its kernel on a real GPU against the sim device, which CI trusts in their place.
 * Skipped, with the reason, where CUDA is not usable. Near-ties and the largest differences are printed
 * (target/surefire-reports/dev.thaw.examples.mlp.MlpGpuTest-output.txt).
 */
class MlpGpuTest {

  /** CUDA and sim outputs may differ by this fraction of the output's scale, sum_k |a_k w_kn| + |b_n|. */
  private static final double RELATIVE = 1e-4;
  /**
   * Where a hidden activation differs between the devices by an fp32 ulp (their sums run in other orders) and
   * sits on a TF32 rounding boundary, its rounding goes the other way: one TF32 ulp, 2^-10 of it. Between
   * whole functions each output may carry one such step, of its largest term |a_k w_kn|.
   */
  private static final double ONE_FLIP = 0x1p-10;

  @BeforeEach
  void needsCuda() {
    Assumptions.assumeTrue(CudaDriver.availability().available(),
        () -> "no usable GPU: " + CudaDriver.availability().unavailabilityCause());
  }

  static Stream<LinearRun> kernelShapes() {
    return Stream.of(new LinearRun(1, 1, 1, false, 11), new LinearRun(1, 10, 64, true, 12),
        new LinearRun(3, 17, 5, true, 13), new LinearRun(33, 10, 256, false, 14), new LinearRun(64, 64, 32, true, 15),
        new LinearRun(65, 65, 33, false, 16), new LinearRun(130, 65, 70, true, 17), new LinearRun(5, 7, 0, true, 18),
        new LinearRun(17, 300, 20, false, 19), new LinearRun(64, 256, 256, true, 20), new LinearRun(2, 1000, 9, false, 21));
  }

  /**
   * mlp_linear on the GPU is the TF32 product (operands rounded as cvt.rna, fp32 sums: within 2 (K + 2) fp32
   * ulps of each output's scale), writes nothing past M*N, covers every tile from a one-block grid, and agrees
   * with the twin.
   */
  @ParameterizedTest
  @MethodSource("kernelShapes")
  void linearKernelIsTheTf32ProductAndAgreesWithTheTwin(LinearRun run) {
    float[] cuda;
    float[] oneBlock;
    try (GpuDriver driver = CudaDriver.open(); GpuContext ctx = driver.createContext(0)) {
      cuda = run.run(ctx);
      oneBlock = run.run(ctx, Dim3.of(1), Dim3.of(128));
      float[] wrongBlock = run.run(ctx, Dim3.of(4), Dim3.of(64));
      for (int i = 0; i < wrongBlock.length; i++) {
        assertEquals(LinearRun.SENTINEL, Float.floatToRawIntBits(wrongBlock[i]),
            run + ": a block of 64 threads must touch nothing, but wrote y[" + i + "]");
      }
    }
    run.assertMatches("cuda", cuda, 2.0);
    assertArrayEquals(cuda, oneBlock, run + ": a one-block grid must compute the same tiles the same way");
    float[] sim;
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      sim = run.run(ctx);
    }
    double worst = 0;
    for (int r = 0; r < run.m; r++) {
      for (int c = 0; c < run.n; c++) {
        double scale = run.scale(r, c);
        double diff = Math.abs(cuda[r * run.n + c] - sim[r * run.n + c]);
        worst = Math.max(worst, diff / scale);
        if (!(diff <= RELATIVE * scale)) {
          fail(String.format("%s: row %d column %d: sim %.9g, cuda %.9g; |diff| %.3g > %.0e x scale %.3g", run, r, c,
              sim[r * run.n + c], cuda[r * run.n + c], diff, RELATIVE, scale));
        }
      }
    }
    System.out.printf("%s: largest |cuda - sim| / scale %.3g%n", run, worst);
  }

  static Stream<Arguments> functions() {
    return Stream.of(
        Arguments.of("{\"layers\": [3, 17, 5]}", 1),
        Arguments.of("{\"layers\": [3, 17, 5]}", 33),
        Arguments.of("{}", 1),
        Arguments.of("{}", 33),
        Arguments.of("{}", 64),
        Arguments.of("{\"layers\": [1, 1], \"maxBatch\": 1}", 1),
        Arguments.of("{\"layers\": [70, 130, 65], \"maxBatch\": 130, \"seed\": 7}", 130),
        Arguments.of("{\"layers\": [20, 300, 40, 7], \"seed\": -3}", 17),
        Arguments.of("{\"layers\": [784, 512, 512, 10], \"maxBatch\": 256}", 200));
  }

  /**
   * The function on CUDA and on the sim, same config and request: outputs within 1e-4 of their scale, both
   * within the TF32 bound of the fp64 reference, and the same argmax except at near-ties (printed).
   */
  @ParameterizedTest
  @MethodSource("functions")
  void functionOnCudaMatchesTheSim(String config, int rows) throws Exception {
    MlpFunction f = new MlpFunction();
    JsonNode onCuda;
    JsonNode onSim;
    MlpReference.Result ref;
    List<Integer> layers;
    try (GpuDriver driver = CudaDriver.open(); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      MlpFunction.State s = f.init(session, json(config));
      layers = s.layers();
      float[] in = MlpTesting.input(rows * 31L + 5, rows, s.inputs());
      onCuda = f.invoke(session, s, MlpTesting.request(in, s.inputs())).json();
      ref = MlpReference.forward(layers, MlpTesting.weights(session, s), MlpTesting.biases(session, s), in, rows);
      Assertions.assertThrows(InvalidRequestException.class,
          () -> f.invoke(session, s, FunctionRequest.of(json("{\"inputs\": []}"))));
      assertEquals(onCuda, f.invoke(session, s, MlpTesting.request(in, s.inputs())).json(),
          config + ": the same request after a bad one, on CUDA");
    }
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      MlpFunction.State s = f.init(session, json(config));
      onSim = f.invoke(session, s, MlpTesting.request(MlpTesting.input(rows * 31L + 5, rows, s.inputs()),
          s.inputs())).json();
    }
    String what = config + " x" + rows;
    List<String> ties = new ArrayList<>(MlpTesting.assertMatchesReference(what + " on cuda", layers, onCuda, ref));
    ties.addAll(MlpTesting.assertMatchesReference(what + " on sim", layers, onSim, ref));
    float[][] cuda = MlpTesting.outputs(onCuda);
    float[][] sim = MlpTesting.outputs(onSim);
    double worst = 0;
    for (int r = 0; r < rows; r++) {
      double[] scale = ref.scales()[r];
      for (int c = 0; c < scale.length; c++) {
        double diff = Math.abs(cuda[r][c] - sim[r][c]);
        worst = Math.max(worst, diff / scale[c]);
        double tol = RELATIVE * scale[c] + ONE_FLIP * ref.largestTerms()[r][c];
        if (!(diff <= tol)) {
          fail(String.format("%s: layer %d (output) row %d column %d: sim %.9g, cuda %.9g; |diff| %.3g > %.3g "
              + "(%.0e x scale %.3g + one TF32 step of the largest term %.3g)", what, layers.size() - 2, r, c,
              sim[r][c], cuda[r][c], diff, tol, RELATIVE, scale[c], ref.largestTerms()[r][c]));
        }
      }
      int a = onCuda.get("argmax").get(r).asInt();
      int b = onSim.get("argmax").get(r).asInt();
      if (a != b) {
        double gap = Math.abs(sim[r][a] - sim[r][b]);
        String tie = String.format("%s: row %d argmax cuda %d, sim %d; top-2 gap %.3g", what, r, a, b, gap);
        if (!(gap <= RELATIVE * (scale[a] + scale[b]))) {
          fail(tie + ", more than the tolerance " + RELATIVE * (scale[a] + scale[b]));
        }
        ties.add(tie);
      }
    }
    System.out.printf("%s: largest |cuda - sim| / scale %.3g; near-ties: %s%n", what, worst, ties);
  }

  /**
   * FunctionSessionTest's round trip on CUDA: init's table, device bytes and host state, the first context
   * closed, rebuilt in a new one at the same addresses, serve the same response without init.
   */
  @Test
  void aRebuiltSessionServesTheSameResponseWithoutInitOnCuda() throws Exception {
    MlpFunction f = new MlpFunction();
    FunctionRequest request = MlpTesting.request(MlpTesting.input(3, 33, 64), 64);
    SessionTable table;
    List<ByteBuffer> contents = new ArrayList<>();
    JsonNode stateJson;
    JsonNode first;
    try (GpuDriver driver = CudaDriver.open(); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      MlpFunction.State s = f.init(session, json("{}"));
      first = f.invoke(session, s, request).json();
      table = session.table();
      for (AllocationRecord a : table.allocations()) {
        ByteBuffer b = ByteBuffer.allocateDirect((int) a.size());
        session.download(new BufferRef(a.name()), 0, b);
        contents.add(b);
      }
      stateJson = HostStates.write(s);
    }
    try (GpuDriver driver = CudaDriver.open(); GpuContext ctx = driver.createContext(0);
        FunctionSession restored = FunctionSession.rebuild(ctx, table)) {
      for (int i = 0; i < table.allocations().size(); i++) {
        AllocationRecord a = table.allocations().get(i);
        assertEquals(a.address(), restored.address(new BufferRef(a.name())), "same address for " + a.name());
        restored.upload(new BufferRef(a.name()), 0, contents.get(i));
      }
      MlpFunction.State s = HostStates.read(stateJson, MlpFunction.State.class);
      assertEquals(first, f.invoke(restored, s, request).json());
    }
  }
}
