package dev.thaw.examples.mlp;

import static dev.thaw.examples.mlp.MlpTesting.json;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.DoubleNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.AllocationRecord;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.HostStates;
import dev.thaw.runtime.function.InvalidConfigException;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.SessionTable;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.Random;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/** The mlp function on the sim device: against an fp64 reference, with bad input and configs, and rebuilt. */
class MlpFunctionTest {

  private final MlpFunction f = new MlpFunction();

  static Stream<Arguments> shapes() {
    return Stream.of(
        Arguments.of("{\"layers\": [3, 17, 5]}", 1),
        Arguments.of("{\"layers\": [3, 17, 5]}", 33),
        Arguments.of("{}", 1),
        Arguments.of("{}", 33),
        Arguments.of("{}", 64),
        Arguments.of("{\"layers\": [1, 1], \"maxBatch\": 1}", 1),
        Arguments.of("{\"layers\": [70, 130, 65], \"maxBatch\": 130, \"seed\": 7}", 130),
        Arguments.of("{\"layers\": [20, 300, 40, 7], \"seed\": -3}", 17));
  }

  /** The outputs are the MLP of the weights the session holds, to TF32 precision, and so are the argmaxes. */
  @ParameterizedTest
  @MethodSource("shapes")
  void matchesAnFp64ReferenceOfItsOwnWeights(String config, int rows) throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      MlpFunction.State s = f.init(session, json(config));
      float[] in = MlpTesting.input(rows * 31L + 5, rows, s.inputs());
      JsonNode response = f.invoke(session, s, MlpTesting.request(in, s.inputs())).json();
      MlpReference.Result ref = MlpReference.forward(s.layers(), MlpTesting.weights(session, s),
          MlpTesting.biases(session, s), in, rows);
      List<String> ties = MlpTesting.assertMatchesReference(config + " x" + rows, s.layers(), response, ref);
      ties.forEach(System.out::println);
    }
  }

  /**
   * Weights are the documented recipe of the seed, regenerated here: so an image built anywhere holds the same
   * bytes, and the reference above tests the function, not a copy of its numbers.
   */
  @Test
  void weightsAreTheDocumentedFunctionOfTheSeed() throws Exception {
    List<Integer> layers = List.of(5, 9, 4);
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      MlpFunction.State s = f.init(session, json("{\"layers\": [5, 9, 4], \"seed\": 1234}"));
      float[][] w = MlpTesting.weights(session, s);
      float[][] b = MlpTesting.biases(session, s);
      for (int l = 0; l < 2; l++) {
        int k = layers.get(l);
        int n = layers.get(l + 1);
        Random r = new Random(1234 + 0x9E3779B97F4A7C15L * (l + 1));
        double bound = l == 1 ? Math.sqrt(6.0 / (k + n)) : Math.sqrt(6.0 / k);
        for (int i = 0; i < k * n; i++) {
          float want = (float) ((2.0 * r.nextFloat() - 1.0) * bound);
          assertEquals(Float.floatToIntBits(want), Float.floatToIntBits(w[l][i]), "w" + l + "[" + i + "]");
        }
        for (int i = 0; i < n; i++) {
          float want = (float) ((2.0 * r.nextFloat() - 1.0) * 0.1);
          assertEquals(Float.floatToIntBits(want), Float.floatToIntBits(b[l][i]), "b" + l + "[" + i + "]");
        }
      }
    }
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession one = FunctionSession.record(ctx); FunctionSession two = FunctionSession.record(ctx)) {
      MlpFunction.State a = f.init(one, json("{\"layers\": [5, 9, 4], \"seed\": 1}"));
      MlpFunction.State b = f.init(two, json("{\"layers\": [5, 9, 4], \"seed\": 2}"));
      assertNotEquals(List.of(MlpTesting.weights(one, a)[0][0]), List.of(MlpTesting.weights(two, b)[0][0]));
    }
  }

  @Test
  void rawFloat32InputGivesTheSameResponseAsJson() throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      MlpFunction.State s = f.init(session, json("{\"layers\": [6, 11, 3]}"));
      float[] in = MlpTesting.input(9, 5, 6);
      ByteBuffer bytes = ByteBuffer.allocate(4 * in.length).order(ByteOrder.LITTLE_ENDIAN);
      for (float v : in) {
        bytes.putFloat(v);
      }
      bytes.flip();
      JsonNode raw = f.invoke(session, s, new FunctionRequest(json("{\"rows\": 5}"), Optional.of(bytes))).json();
      assertEquals(f.invoke(session, s, MlpTesting.request(in, 6)).json(), raw);
      assertEquals(5, raw.get("argmax").size());
    }
  }

  static Stream<Arguments> badRequests() {
    ObjectNode nan = MlpTesting.JSON.createObjectNode();
    nan.putArray("inputs").addArray().add(1).add(DoubleNode.valueOf(Double.NaN)).add(3);
    ObjectNode inf = MlpTesting.JSON.createObjectNode();
    inf.putArray("inputs").addArray().add(DoubleNode.valueOf(Double.NEGATIVE_INFINITY)).add(2).add(3);
    return Stream.of(
        Arguments.of(json("{}"), null, "needs 'inputs'"),
        Arguments.of(json("{\"input\": [[1, 2, 3]]}"), null, "needs 'inputs'"),
        Arguments.of(json("[[1, 2, 3]]"), null, "must be a JSON object"),
        Arguments.of(json("{\"inputs\": 5}"), null, "'inputs' must be an array of rows, not number"),
        Arguments.of(json("{\"inputs\": [1, 2, 3]}"), null, "inputs[0] must be an array of 3 numbers, not number"),
        Arguments.of(json("{\"inputs\": []}"), null, "'inputs' holds 0 rows; a request needs at least one"),
        Arguments.of(json("{\"inputs\": [[1, 2, 3], [1, 2]]}"), null, "inputs[1] has 2 values; the model takes 3"),
        Arguments.of(json("{\"inputs\": [[1, 2, 3, 4]]}"), null, "inputs[0] has 4 values; the model takes 3"),
        Arguments.of(json("{\"inputs\": [[1, \"2\", 3]]}"), null, "inputs[0][1] must be a number, not string"),
        Arguments.of(json("{\"inputs\": [[1, null, 3]]}"), null, "inputs[0][1] must be a number, not null"),
        Arguments.of(json("{\"inputs\": [[1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, 3]]}"), null,
            "'inputs' holds 5 rows; this function serves at most 4"),
        Arguments.of(json("{\"inputs\": [[1, 2, 1e39]]}"), null, "inputs[0][2] is 1.0E39, which is not a finite"),
        Arguments.of(nan, null, "inputs[0][1] is NaN, which is not a finite float32"),
        Arguments.of(inf, null, "inputs[0][0] is -Infinity, which is not a finite float32"),
        Arguments.of(json("{}"), floats(1, 2, 3), "raw float32 input needs 'rows'"),
        Arguments.of(json("{\"rows\": \"1\"}"), floats(1, 2, 3), "'rows' must be an integer, not string"),
        Arguments.of(json("{\"rows\": 1.5}"), floats(1, 2, 3), "'rows' must be an integer, not number"),
        Arguments.of(json("{\"rows\": 0}"), floats(), "'rows' is 0 rows; a request needs at least one"),
        Arguments.of(json("{\"rows\": 5}"), floats(new float[15]), "'rows' is 5 rows; this function serves at most 4"),
        Arguments.of(json("{\"rows\": 2}"), floats(1, 2, 3), "raw input of 12 bytes does not hold 2 rows of 3 float32 "
            + "values: that is 24 bytes"),
        Arguments.of(json("{\"rows\": 1}"), floats(1, 2, 3, 4), "raw input of 16 bytes does not hold 1 rows"),
        Arguments.of(json("{\"rows\": 2}"), floats(1, 2, 3, 4, Float.NaN, 6), "raw input row 1 column 1 is NaN"),
        Arguments.of(json("{\"rows\": 1}"), floats(Float.POSITIVE_INFINITY, 2, 3), "raw input row 0 column 0 is "
            + "Infinity"),
        Arguments.of(json("{\"rows\": 1, \"inputs\": [[1, 2, 3]]}"), floats(1, 2, 3), "not both"));
  }

  private static ByteBuffer floats(float... v) {
    ByteBuffer b = ByteBuffer.allocate(4 * v.length).order(ByteOrder.LITTLE_ENDIAN);
    for (float x : v) {
      b.putFloat(x);
    }
    return b.flip();
  }

  /** Each bad request is refused with a message naming the problem, before any launch; the next one works. */
  @ParameterizedTest
  @MethodSource("badRequests")
  void badRequestsAreNamedBeforeAnyLaunchAndLoseNothing(JsonNode json, ByteBuffer binary, String message)
      throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      MlpFunction.State s = f.init(session, json("{\"layers\": [3, 8, 2], \"maxBatch\": 4}"));
      FunctionRequest good = FunctionRequest.of(json("{\"inputs\": [[0.5, -1, 2], [3, 0, -0.25]]}"));
      JsonNode before = f.invoke(session, s, good).json();
      AtomicInteger launches = new AtomicInteger();
      ((SimContext) ctx).addLaunchListener(r -> launches.incrementAndGet());
      InvalidRequestException e = assertThrows(InvalidRequestException.class,
          () -> f.invoke(session, s, new FunctionRequest(json, Optional.ofNullable(binary))));
      assertTrue(e.getMessage().contains(message), () -> "expected '" + message + "' in: " + e.getMessage());
      session.synchronize();
      assertEquals(0, launches.get(), "a bad request launched a kernel");
      assertEquals(before, f.invoke(session, s, good).json());
    }
  }

  static Stream<Arguments> badConfigs() {
    return Stream.of(
        Arguments.of("[3, 4]", "must be a JSON object"),
        Arguments.of("{\"layer\": [3, 4]}", "unknown mlp config key 'layer'"),
        Arguments.of("{\"layers\": \"3,4\"}", "'layers' must be an array"),
        Arguments.of("{\"layers\": []}", "at least 2 widths"),
        Arguments.of("{\"layers\": [5]}", "at least 2 widths (input and output), not 1"),
        Arguments.of("{\"layers\": [3, 0, 2]}", "layers[1] is 0; a width must be 1 to 65536"),
        Arguments.of("{\"layers\": [-3, 2]}", "layers[0] is -3"),
        Arguments.of("{\"layers\": [3, 65537]}", "layers[1] is 65537; a width must be 1 to 65536"),
        Arguments.of("{\"layers\": [3, 1e12]}", "layers[1] must be an integer width"),
        Arguments.of("{\"layers\": [3, 2.5]}", "layers[1] must be an integer width"),
        Arguments.of("{\"layers\": [3, \"4\"]}", "layers[1] must be an integer width, not string"),
        Arguments.of("{\"layers\": [65536, 65536]}", "layer 0 (65536 x 65536) has 4295032832 parameters"),
        Arguments.of("{\"layers\": [" + "2, ".repeat(65) + "2]}", "at most 65 (64 layers)"),
        Arguments.of("{\"maxBatch\": 0}", "'maxBatch' is 0; it must be 1 to 65536"),
        Arguments.of("{\"maxBatch\": 100000}", "'maxBatch' is 100000"),
        Arguments.of("{\"maxBatch\": \"64\"}", "'maxBatch' must be an integer"),
        Arguments.of("{\"layers\": [65536, 4], \"maxBatch\": 65536}", "floats per activation buffer"),
        Arguments.of("{\"seed\": 1.5}", "'seed' must be an integer"),
        Arguments.of("{\"seed\": \"x\"}", "'seed' must be an integer, not string"));
  }

  /** A bad config is refused with its reason before anything is allocated or loaded. */
  @ParameterizedTest
  @MethodSource("badConfigs")
  void badConfigsAreNamedBeforeAnythingIsAllocated(String config, String message) {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      InvalidConfigException e = assertThrows(InvalidConfigException.class, () -> f.init(session, json(config)));
      assertTrue(e.getMessage().contains(message), () -> "expected '" + message + "' in: " + e.getMessage());
      assertTrue(session.table().allocations().isEmpty() && session.table().modules().isEmpty());
    }
  }

  @Test
  void hostStateIsConfigAndReferencesOnlyAndRoundTrips() throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      MlpFunction.State s = f.init(session, json("{}"));
      JsonNode state = HostStates.write(s);
      assertEquals(json("{\"layers\": [64, 256, 256, 10], \"maxBatch\": 64, \"weights\": [\"w0\", \"w1\", \"w2\"], "
          + "\"biases\": [\"b0\", \"b1\", \"b2\"], \"act0\": \"act0\", \"act1\": \"act1\", \"linear\": "
          + "\"mlp/mlp_linear\"}"), state);
      assertEquals(s, HostStates.read(state, MlpFunction.State.class));
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> HostStates.read(
          json("{\"layers\": [3, 4], \"maxBatch\": 1, \"weights\": [], \"biases\": [], \"act0\": \"a\", "
              + "\"act1\": \"b\", \"linear\": \"mlp/mlp_linear\"}"), MlpFunction.State.class));
      assertTrue(e.getMessage().contains("one weight and one bias buffer per layer"), e.getMessage());
      assertEquals(List.of("w0", "b0", "w1", "b1", "w2", "b2", "act0", "act1"),
          session.table().allocations().stream().map(AllocationRecord::name).toList());
    }
  }

  /**
   * As FunctionSessionTest's, for this function: init's table, device bytes and host-state JSON make a session
   * in another driver (another process, on the sim) that serves the same response without init.
   */
  @Test
  void aRebuiltSessionServesTheSameResponseWithoutInit() throws Exception {
    FunctionRequest request = MlpTesting.request(MlpTesting.input(3, 33, 3), 3);
    SessionTable table;
    List<ByteBuffer> contents = new ArrayList<>();
    JsonNode stateJson;
    JsonNode first;
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      MlpFunction.State s = f.init(session, json("{\"layers\": [3, 17, 5], \"seed\": 11}"));
      first = f.invoke(session, s, request).json();
      table = session.table();
      for (AllocationRecord a : table.allocations()) {
        ByteBuffer b = ByteBuffer.allocateDirect((int) a.size());
        session.download(new BufferRef(a.name()), 0, b);
        contents.add(b);
      }
      stateJson = HostStates.write(s);
    }
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession restored = FunctionSession.rebuild(ctx, table)) {
      for (int i = 0; i < table.allocations().size(); i++) {
        AllocationRecord a = table.allocations().get(i);
        assertEquals(a.address(), restored.address(new BufferRef(a.name())), "same address for " + a.name());
        restored.upload(new BufferRef(a.name()), 0, contents.get(i));
      }
      MlpFunction.State s = HostStates.read(stateJson, MlpFunction.State.class);
      assertEquals(first, f.invoke(restored, s, request).json());
      assertArrayEquals(new float[] {MlpTesting.weights(restored, s)[1][4]},
          new float[] {contents.get(2).order(ByteOrder.LITTLE_ENDIAN).getFloat(16)});
    }
  }
}
