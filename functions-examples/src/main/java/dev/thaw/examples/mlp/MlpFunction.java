package dev.thaw.examples.mlp;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.FunctionSignature;
import dev.thaw.runtime.function.InvalidConfigException;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.function.TensorSpec;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.PtxResources;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.Random;
import java.util.Set;

/**
 * A small multi-layer perceptron, fp32: a policy or classifier network, and the fast function for tests.
 *
 * <h2>Config</h2>
 * {@code {"layers": [in, h1, ..., out], "seed": 42, "maxBatch": 64}}, each key optional (defaults {@link
 * #DEFAULT_LAYERS}, {@link #DEFAULT_SEED}, {@link #DEFAULT_MAX_BATCH}). Every layer but the last is followed
 * by ReLU. Weights are made from the seed by {@link #initLayer}, the same on every platform and JDK.
 *
 * <h2>Requests</h2>
 * {@code {"inputs": [[...], ...]}}, a batch of rows of {@code in} numbers each; or {@code {"rows": R}} with
 * {@code R * in} little-endian float32 values as raw bytes beside the JSON. The response is
 * {@code {"outputs": [[...], ...], "argmax": [...]}}, {@code argmax} being the first index of each row's maximum.
 * Every request is checked whole before anything is copied or launched, so a bad one leaves the device as
 * it was.
 *
 * <h2>Device</h2>
 * Per layer {@code i}: {@code w<i>} (row-major {@code [layers[i], layers[i+1]]}) and {@code b<i>}; two
 * activation buffers {@code act0}/{@code act1} of {@code maxBatch} rows of the widest layer, which the layers
 * ping-pong between. Each layer is one {@code mlp_linear} launch on TF32 tensor cores (see {@code mlp.cu}), so
 * results agree with an fp32 reference to TF32 precision (about 1e-3 relative), not to fp32 precision.
 */
public final class MlpFunction implements ThawFunction<MlpFunction.State> {

  public static final List<Integer> DEFAULT_LAYERS = List.of(64, 256, 256, 10);
  public static final long DEFAULT_SEED = 42;
  public static final int DEFAULT_MAX_BATCH = 64;
  /** The widest layer, and the largest batch, a config may ask for. */
  public static final int MAX_WIDTH = 65536;
  public static final int MAX_LAYERS = 64;
  /** Parameters (weights and biases) of one layer and activation floats of one buffer: 1 GiB each at most. */
  public static final long MAX_FLOATS = 1L << 28;

  static final String MODULE = "mlp";
  static final String PTX_RESOURCE = "/dev/thaw/examples/mlp/mlp.ptx";
  private static final Set<String> CONFIG_KEYS = Set.of("layers", "seed", "maxBatch");
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
  /** Rows of weights generated and uploaded at a time, so init needs little heap for any layer. */
  private static final int UPLOAD_FLOATS = 1 << 20;

  /**
   * The host state: config ints and references only.
   *
   * @param layers the widths, input first
   * @param maxBatch the most rows a request may hold
   * @param weights {@code w<i>} per layer
   * @param biases {@code b<i>} per layer
   * @param act0 activations, the input of layer 0
   * @param act1 activations, the output of layer 0
   * @param linear the {@code mlp_linear} kernel
   */
  public record State(List<Integer> layers, int maxBatch, List<BufferRef> weights, List<BufferRef> biases,
      BufferRef act0, BufferRef act1, KernelRef linear) {

    public State {
      layers = List.copyOf(layers);
      weights = List.copyOf(weights);
      biases = List.copyOf(biases);
      if (layers.size() < 2 || weights.size() != layers.size() - 1 || biases.size() != layers.size() - 1) {
        throw new IllegalArgumentException("an MLP of " + layers.size() + " widths needs one weight and one bias "
            + "buffer per layer, not " + weights.size() + " and " + biases.size());
      }
      if (maxBatch < 1) {
        throw new IllegalArgumentException("maxBatch must be positive, not " + maxBatch);
      }
    }

    public int inputs() {
      return layers.get(0);
    }

    public int outputs() {
      return layers.get(layers.size() - 1);
    }
  }

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  /** {@code inputs} FP32 [rows, in] in; {@code outputs} FP32 [rows, out] and {@code argmax} INT64 [rows] out. */
  @Override
  public FunctionSignature signature(State s) {
    return new FunctionSignature(List.of(TensorSpec.of("inputs", "FP32", -1, s.inputs())),
        List.of(TensorSpec.of("outputs", "FP32", -1, s.outputs()), TensorSpec.of("argmax", "INT64", -1)),
        Optional.empty());
  }

  @Override
  public State init(FunctionSession session, JsonNode config) throws IOException {
    List<Integer> layers = layers(config);
    long seed = seed(config);
    int maxBatch = maxBatch(config);
    int widest = layers.stream().mapToInt(Integer::intValue).max().orElseThrow();
    if ((long) maxBatch * widest > MAX_FLOATS) {
      throw new InvalidConfigException("maxBatch " + maxBatch + " rows of the widest layer (" + widest
          + ") need " + (long) maxBatch * widest + " floats per activation buffer; at most " + MAX_FLOATS);
    }

    String ptx = ptx();
    session.loadModule(MODULE, ptx);
    KernelRef linear = session.kernelRef(MODULE, MlpSimKernels.Linear.ENTRY);
    List<BufferRef> weights = new ArrayList<>();
    List<BufferRef> biases = new ArrayList<>();
    for (int i = 0; i + 1 < layers.size(); i++) {
      int k = layers.get(i);
      int n = layers.get(i + 1);
      BufferRef w = session.allocate("w" + i, 4L * k * n);
      BufferRef b = session.allocate("b" + i, 4L * n);
      initLayer(session, seed, i, k, n, i + 2 == layers.size(), w, b);
      weights.add(w);
      biases.add(b);
    }
    BufferRef act0 = session.allocate("act0", 4L * maxBatch * widest);
    BufferRef act1 = session.allocate("act1", 4L * maxBatch * widest);
    State state = new State(layers, maxBatch, weights, biases, act0, act1, linear);

    ArrayNode zeros = NODES.arrayNode();
    for (int i = 0; i < state.inputs(); i++) {
      zeros.add(0.0f);
    }
    ObjectNode warmUp = NODES.objectNode();
    warmUp.putArray("inputs").add(zeros);
    invoke(session, state, FunctionRequest.of(warmUp));
    return state;
  }

  /**
   * Generates and uploads layer {@code layer}'s parameters (see {@link LayerParameters}), a bounded chunk at a
   * time.
   */
  private static void initLayer(FunctionSession session, long seed, int layer, int k, int n, boolean last,
      BufferRef w, BufferRef b) {
    LayerParameters parameters = new LayerParameters(seed, layer, k, n, last);
    long total = (long) k * n;
    int chunk = (int) Math.min(total, UPLOAD_FLOATS);
    ByteBuffer bytes = ByteBuffer.allocateDirect(4 * chunk).order(ByteOrder.LITTLE_ENDIAN);
    for (long done = 0; done < total; done += chunk) {
      int count = (int) Math.min(chunk, total - done);
      bytes.clear();
      for (int i = 0; i < count; i++) {
        bytes.putFloat(parameters.nextWeight());
      }
      bytes.flip();
      session.upload(w, 4 * done, bytes);
    }
    ByteBuffer bias = ByteBuffer.allocateDirect(4 * n).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < n; i++) {
      bias.putFloat(parameters.nextBias());
    }
    bias.flip();
    session.upload(b, 0, bias);
  }

  /**
   * The values of layer {@code layer}'s parameters, in order: its {@code k × n} weights row-major, then its
   * {@code n} biases. Public so that another framework can load the very weights a config makes (the cold-start
   * harness writes them as safetensors for PyTorch).
   *
   * <p>Each layer has its own {@link Random} (whose sequence the JDK specifies), seeded with
   * {@code seed + 0x9E3779B97F4A7C15L * (layer + 1)}; each value is {@code (2 * nextFloat() - 1) * bound}
   * computed in double and rounded to float. Bounds: He-uniform {@code sqrt(6 / k)} before a ReLU,
   * Glorot-uniform {@code sqrt(6 / (k + n))} for the output layer; biases within 0.1, not zero, so that a
   * kernel which drops them is caught. All weights must be taken before the first bias.
   */
  public static final class LayerParameters {
    private final Random random;
    private final double bound;

    public LayerParameters(long seed, int layer, int k, int n, boolean last) {
      this.random = new Random(seed + 0x9E3779B97F4A7C15L * (layer + 1));
      this.bound = last ? Math.sqrt(6.0 / ((double) k + n)) : Math.sqrt(6.0 / k);
    }

    public float nextWeight() {
      return (float) ((2.0 * random.nextFloat() - 1.0) * bound);
    }

    public float nextBias() {
      return (float) ((2.0 * random.nextFloat() - 1.0) * 0.1);
    }
  }

  @Override
  public void validate(State s, FunctionRequest request) {
    input(s, request);
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request) {
    float[] input = input(s, request);
    int rows = input.length / s.inputs();

    ByteBuffer in = ByteBuffer.allocateDirect(4 * input.length).order(ByteOrder.LITTLE_ENDIAN);
    in.asFloatBuffer().put(input);
    session.upload(s.act0(), 0, in);
    BufferRef from = s.act0();
    BufferRef to = s.act1();
    int layers = s.layers().size() - 1;
    for (int i = 0; i < layers; i++) {
      int k = s.layers().get(i);
      int n = s.layers().get(i + 1);
      long tiles = ceilDiv(rows, MlpSimKernels.LINEAR_TILE) * ceilDiv(n, MlpSimKernels.LINEAR_TILE);
      session.launch(s.linear(), Dim3.of((int) Math.min(tiles, Integer.MAX_VALUE)),
          Dim3.of(MlpSimKernels.LINEAR_THREADS), from, s.weights().get(i), s.biases().get(i), to, rows, n, k,
          i + 1 < layers ? 1 : 0);
      BufferRef t = from;
      from = to;
      to = t;
    }

    int outs = s.outputs();
    ByteBuffer out = ByteBuffer.allocateDirect(4 * rows * outs).order(ByteOrder.LITTLE_ENDIAN);
    session.download(from, 0, out);
    ObjectNode json = NODES.objectNode();
    ArrayNode outputs = json.putArray("outputs");
    ArrayNode argmax = json.putArray("argmax");
    for (int r = 0; r < rows; r++) {
      ArrayNode row = outputs.addArray();
      int best = 0;
      for (int j = 0; j < outs; j++) {
        float v = out.getFloat(4 * (r * outs + j));
        row.add(v);
        if (v > out.getFloat(4 * (r * outs + best))) {
          best = j;
        }
      }
      argmax.add(best);
    }
    return FunctionResponse.of(json);
  }

  private static long ceilDiv(long a, long b) {
    return (a + b - 1) / b;
  }

  // ---- requests: checked whole before the device is touched ----

  private static float[] input(State s, FunctionRequest request) {
    JsonNode json = request.json();
    if (!json.isObject()) {
      throw new InvalidRequestException("the request must be a JSON object, not " + kind(json));
    }
    if (request.binary().isPresent()) {
      if (json.has("inputs")) {
        throw new InvalidRequestException("give 'inputs' in the JSON or raw float32 bytes beside it, not both");
      }
      return binaryInput(s, json, request.binary().get());
    }
    JsonNode inputs = json.get("inputs");
    if (inputs == null) {
      throw new InvalidRequestException("the request needs 'inputs', an array of rows of " + s.inputs()
          + " numbers (or 'rows' with raw float32 bytes beside the JSON)");
    }
    if (!inputs.isArray()) {
      throw new InvalidRequestException("'inputs' must be an array of rows, not " + kind(inputs));
    }
    int rows = checkRows(s, inputs.size(), "'inputs' holds");
    int width = s.inputs();
    float[] values = new float[rows * width];
    for (int r = 0; r < rows; r++) {
      JsonNode row = inputs.get(r);
      if (!row.isArray()) {
        throw new InvalidRequestException("inputs[" + r + "] must be an array of " + width + " numbers, not "
            + kind(row));
      }
      if (row.size() != width) {
        throw new InvalidRequestException("inputs[" + r + "] has " + row.size() + " values; the model takes "
            + width + " per row" + (r > 0 ? " (rows must all be the same length)" : ""));
      }
      for (int c = 0; c < width; c++) {
        JsonNode v = row.get(c);
        if (!v.isNumber()) {
          throw new InvalidRequestException("inputs[" + r + "][" + c + "] must be a number, not " + kind(v));
        }
        values[r * width + c] = finite(v.floatValue(), "inputs[" + r + "][" + c + "]", v.asText());
      }
    }
    return values;
  }

  private static float[] binaryInput(State s, JsonNode json, ByteBuffer binary) {
    JsonNode rowsNode = json.get("rows");
    if (rowsNode == null) {
      throw new InvalidRequestException("raw float32 input needs 'rows' in the JSON: how many rows of "
          + s.inputs() + " values the bytes hold");
    }
    if (!rowsNode.canConvertToExactIntegral() || !rowsNode.canConvertToInt()) {
      throw new InvalidRequestException("'rows' must be an integer, not " + kind(rowsNode) + " " + rowsNode);
    }
    int rows = checkRows(s, rowsNode.asInt(), "'rows' is");
    long expected = 4L * rows * s.inputs();
    if (binary.remaining() != expected) {
      throw new InvalidRequestException("raw input of " + binary.remaining() + " bytes does not hold " + rows
          + " rows of " + s.inputs() + " float32 values: that is " + expected + " bytes");
    }
    ByteBuffer le = binary.duplicate().order(ByteOrder.LITTLE_ENDIAN);
    float[] values = new float[rows * s.inputs()];
    for (int i = 0; i < values.length; i++) {
      float v = le.getFloat(le.position() + 4 * i);
      values[i] = finite(v, "raw input row " + i / s.inputs() + " column " + i % s.inputs(), Float.toString(v));
    }
    return values;
  }

  private static int checkRows(State s, int rows, String what) {
    if (rows < 1) {
      throw new InvalidRequestException(what + " " + rows + " rows; a request needs at least one");
    }
    if (rows > s.maxBatch()) {
      throw new InvalidRequestException(what + " " + rows + " rows; this function serves at most " + s.maxBatch()
          + " per request (its maxBatch)");
    }
    return rows;
  }

  private static float finite(float v, String where, String text) {
    if (!Float.isFinite(v)) {
      throw new InvalidRequestException(where + " is " + text + ", which is not a finite float32");
    }
    return v;
  }

  private static String kind(JsonNode node) {
    return node.getNodeType().name().toLowerCase(Locale.ROOT);
  }

  // ---- config ----

  private static List<Integer> layers(JsonNode config) {
    if (config == null || config.isNull() || config.isMissingNode()) {
      return DEFAULT_LAYERS;
    }
    if (!config.isObject()) {
      throw new InvalidConfigException("the mlp config must be a JSON object, not " + kind(config));
    }
    for (Iterator<String> names = config.fieldNames(); names.hasNext(); ) {
      String name = names.next();
      if (!CONFIG_KEYS.contains(name)) {
        throw new InvalidConfigException("unknown mlp config key '" + name + "'; known: layers, seed, maxBatch");
      }
    }
    JsonNode node = config.get("layers");
    if (node == null) {
      return DEFAULT_LAYERS;
    }
    if (!node.isArray()) {
      throw new InvalidConfigException("'layers' must be an array of widths [in, hidden..., out], not " + kind(node));
    }
    if (node.size() < 2) {
      throw new InvalidConfigException("'layers' needs at least 2 widths (input and output), not " + node.size());
    }
    if (node.size() > MAX_LAYERS + 1) {
      throw new InvalidConfigException("'layers' has " + node.size() + " widths; at most " + (MAX_LAYERS + 1)
          + " (" + MAX_LAYERS + " layers)");
    }
    List<Integer> layers = new ArrayList<>(node.size());
    for (int i = 0; i < node.size(); i++) {
      JsonNode v = node.get(i);
      if (!v.isIntegralNumber() || !v.canConvertToInt()) {
        throw new InvalidConfigException("layers[" + i + "] must be an integer width, not " + kind(v) + " " + v);
      }
      int width = v.intValue();
      if (width < 1 || width > MAX_WIDTH) {
        throw new InvalidConfigException("layers[" + i + "] is " + width + "; a width must be 1 to " + MAX_WIDTH);
      }
      if (i > 0 && (long) layers.get(i - 1) * width + width > MAX_FLOATS) {
        throw new InvalidConfigException("layer " + (i - 1) + " (" + layers.get(i - 1) + " x " + width + ") has "
            + ((long) layers.get(i - 1) * width + width) + " parameters; at most " + MAX_FLOATS);
      }
      layers.add(width);
    }
    return List.copyOf(layers);
  }

  private static long seed(JsonNode config) {
    JsonNode node = config == null ? null : config.get("seed");
    if (node == null) {
      return DEFAULT_SEED;
    }
    if (!node.isIntegralNumber() || !node.canConvertToLong()) {
      throw new InvalidConfigException("'seed' must be an integer, not " + kind(node) + " " + node);
    }
    return node.longValue();
  }

  private static int maxBatch(JsonNode config) {
    JsonNode node = config == null ? null : config.get("maxBatch");
    if (node == null) {
      return DEFAULT_MAX_BATCH;
    }
    if (!node.isIntegralNumber() || !node.canConvertToInt()) {
      throw new InvalidConfigException("'maxBatch' must be an integer, not " + kind(node) + " " + node);
    }
    int maxBatch = node.intValue();
    if (maxBatch < 1 || maxBatch > MAX_WIDTH) {
      throw new InvalidConfigException("'maxBatch' is " + maxBatch + "; it must be 1 to " + MAX_WIDTH);
    }
    return maxBatch;
  }


  public static String ptx() {
    return PtxResources.read(MlpFunction.class, PTX_RESOURCE);
  }
}
