package dev.thaw.examples.llama;

import static dev.thaw.examples.transformer.ConfigJson.doubleField;
import static dev.thaw.examples.transformer.ConfigJson.intField;
import static dev.thaw.examples.transformer.ConfigJson.positive;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.examples.llama.kernels.LlamaKernels;
import dev.thaw.examples.transformer.ConfigJson;
import dev.thaw.runtime.function.InvalidConfigException;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * A Llama-family model's shape: what Hugging Face's {@code config.json} says for {@code LlamaForCausalLM},
 * {@code Qwen2ForCausalLM} or {@code MistralForCausalLM}, restricted to what the kernels run.
 *
 * <p>Everything that would change the maths is either represented here or refused by {@link #fromHuggingFace}
 * with the field named: another activation, rope scaling other than {@code llama3}, MoE, quantization, biases
 * other than Qwen2's q/k/v ones. A sliding window is kept ({@link #slidingWindow}) and checked against the
 * context the function serves ({@link #checkContext}).
 *
 * @param name a label: the named shape, or {@code "hf"} for one read from a file
 * @param architecture which family: decides the tensor names' biases
 * @param hiddenSize C
 * @param layers decoder layers
 * @param heads Hq, query heads
 * @param kvHeads Hkv, key-value heads (GQA: Hq / Hkv query heads share one)
 * @param headDim D
 * @param intermediateSize I, the MLP width
 * @param vocabSize V
 * @param maxPositions the longest context the model was made for
 * @param rmsNormEps added to the mean square in every RMSNorm
 * @param ropeTheta the rotary base
 * @param ropeScaling llama3 frequency scaling, or null
 * @param tieEmbeddings whether the LM head is the embedding
 * @param qkvBias whether q/k/v projections have biases (Qwen2)
 * @param slidingWindow attention window, 0 for none
 * @param type the 16-bit type of the weights
 */
public record LlamaConfig(String name, Architecture architecture, int hiddenSize, int layers, int heads,
    int kvHeads, int headDim, int intermediateSize, int vocabSize, int maxPositions, float rmsNormEps,
    double ropeTheta, RopeScaling ropeScaling, boolean tieEmbeddings, boolean qkvBias, int slidingWindow,
    HalfType type) {

  /** The families, by Hugging Face class and {@code model_type}. */
  public enum Architecture {
    LLAMA("LlamaForCausalLM", "llama"),
    QWEN2("Qwen2ForCausalLM", "qwen2"),
    MISTRAL("MistralForCausalLM", "mistral");

    final String className;
    final String modelType;

    Architecture(String className, String modelType) {
      this.className = className;
      this.modelType = modelType;
    }

    public String className() {
      return className;
    }

    public String modelType() {
      return modelType;
    }
  }

  /** Llama 3's rotary frequency scaling ({@code rope_type: llama3}). */
  public record RopeScaling(double factor, double lowFreqFactor, double highFreqFactor,
      int originalMaxPositions) {}

  /** K of every product must be a multiple of this (the tensor-core kernel's K step). */
  public static final int K_MULTIPLE = LlamaKernels.K_MULTIPLE;

  private static final Map<String, LlamaConfig> NAMED = new LinkedHashMap<>();
  private static final RopeScaling LLAMA31 = new RopeScaling(8, 1, 4, 8192);

  static {
    // Real dimensions of the released models (their config.json).
    put(new LlamaConfig("tinyllama-1.1b", Architecture.LLAMA, 2048, 22, 32, 4, 64, 5632, 32000, 2048, 1e-5f,
        10000, null, false, false, 0, HalfType.BF16));
    put(new LlamaConfig("llama-3.2-1b", Architecture.LLAMA, 2048, 16, 32, 8, 64, 8192, 128256, 131072, 1e-5f,
        500000, new RopeScaling(32, 1, 4, 8192), true, false, 0, HalfType.BF16));
    put(new LlamaConfig("llama-3.1-8b", Architecture.LLAMA, 4096, 32, 32, 8, 128, 14336, 128256, 131072, 1e-5f,
        500000, LLAMA31, false, false, 0, HalfType.BF16));
    put(new LlamaConfig("qwen2.5-0.5b", Architecture.QWEN2, 896, 24, 14, 2, 64, 4864, 151936, 32768, 1e-6f,
        1000000, null, true, true, 0, HalfType.BF16));
    put(new LlamaConfig("qwen2.5-7b", Architecture.QWEN2, 3584, 28, 28, 4, 128, 18944, 152064, 32768, 1e-6f,
        1000000, null, false, true, 0, HalfType.BF16));
    put(new LlamaConfig("qwen2.5-32b", Architecture.QWEN2, 5120, 64, 40, 8, 128, 27648, 152064, 32768, 1e-6f,
        1000000, null, false, true, 0, HalfType.BF16));
    put(new LlamaConfig("llama-3.1-70b", Architecture.LLAMA, 8192, 80, 64, 8, 128, 28672, 128256, 131072, 1e-5f,
        500000, LLAMA31, false, false, 0, HalfType.BF16));
    put(new LlamaConfig("mistral-7b", Architecture.MISTRAL, 4096, 32, 32, 8, 128, 14336, 32768, 32768, 1e-5f,
        1000000, null, false, false, 0, HalfType.BF16));
    // For tests: small enough for the sim device and the CPU reference. tiny has llama3 scaling that moves some
    // frequencies (original context 16) and an odd vocabulary; tiny-qwen2 has biases, tied embeddings, 4:1 GQA.
    put(new LlamaConfig("tiny", Architecture.LLAMA, 64, 2, 4, 2, 16, 128, 97, 64, 1e-5f, 10000,
        new RopeScaling(8, 1, 4, 16), false, false, 0, HalfType.BF16));
    put(new LlamaConfig("tiny-qwen2", Architecture.QWEN2, 64, 2, 4, 1, 16, 96, 101, 64, 1e-6f, 1000000, null,
        true, true, 0, HalfType.BF16));
  }

  private static void put(LlamaConfig c) {
    NAMED.put(c.name(), c.validate());
  }

  /** The names {@link #named} knows. */
  public static Set<String> names() {
    return NAMED.keySet();
  }

  /**
   * A named shape.
   *
   * @throws InvalidConfigException if there is none by that name
   */
  public static LlamaConfig named(String name) {
    LlamaConfig c = NAMED.get(name);
    if (c == null) {
      throw new InvalidConfigException("no Llama-family shape named '" + name + "'; known: " + NAMED.keySet());
    }
    return c;
  }

  /** This shape with another weight type. */
  public LlamaConfig withType(HalfType t) {
    return new LlamaConfig(name, architecture, hiddenSize, layers, heads, kvHeads, headDim, intermediateSize,
        vocabSize, maxPositions, rmsNormEps, ropeTheta, ropeScaling, tieEmbeddings, qkvBias, slidingWindow, t);
  }

  /** This shape with fewer layers (every dimension kept): for comparisons that must run in little time. */
  public LlamaConfig withLayers(int n) {
    return new LlamaConfig(name, architecture, hiddenSize, n, heads, kvHeads, headDim, intermediateSize,
        vocabSize, maxPositions, rmsNormEps, ropeTheta, ropeScaling, tieEmbeddings, qkvBias, slidingWindow, type)
        .validate();
  }

  /** Width of a fused q | k | v row: (Hq + 2 Hkv) D. */
  public int qkvWidth() {
    return (heads + 2 * kvHeads) * headDim;
  }

  /** Hq D, the attention output width. */
  public int attentionWidth() {
    return heads * headDim;
  }

  /** Parameters, counting a tied embedding once. */
  public long parameterCount() {
    long c = hiddenSize;
    long perLayer = 2 * c + c * qkvWidth() + (qkvBias ? qkvWidth() : 0) + (long) attentionWidth() * c
        + 3L * c * intermediateSize;
    return (long) vocabSize * c * (tieEmbeddings ? 1 : 2) + layers * perLayer + c;
  }

  /**
   * The rotary inverse frequencies, {@code 1 / theta^(2i / D)} for i in [0, D/2), with llama3 scaling applied
   * as transformers' {@code _compute_llama3_parameters} does (in double, then rounded to float).
   */
  public float[] inverseFrequencies() {
    int half = headDim / 2;
    float[] out = new float[half];
    for (int i = 0; i < half; i++) {
      // transformers: 1 / base ** (arange(0, dim, 2, int64).float() / dim), in fp32.
      float exponent = (float) (2 * i) / (float) headDim;
      double f = 1.0 / Math.pow(ropeTheta, exponent);
      if (ropeScaling != null) {
        RopeScaling s = ropeScaling;
        double lowWavelen = s.originalMaxPositions() / s.lowFreqFactor();
        double highWavelen = s.originalMaxPositions() / s.highFreqFactor();
        double wavelen = 2 * Math.PI / f;
        if (wavelen > lowWavelen) {
          f = f / s.factor();
        } else if (wavelen >= highWavelen) {
          double smooth = (s.originalMaxPositions() / wavelen - s.lowFreqFactor())
              / (s.highFreqFactor() - s.lowFreqFactor());
          f = (1 - smooth) * f / s.factor() + smooth * f;
        }
      }
      out[i] = (float) f;
    }
    return out;
  }

  /**
   * This config if the kernels can run it.
   *
   * @throws InvalidConfigException naming the first field that is out of range
   */
  public LlamaConfig validate() {
    positive("hidden_size", hiddenSize);
    positive("num_hidden_layers", layers);
    positive("num_attention_heads", heads);
    positive("num_key_value_heads", kvHeads);
    positive("head_dim", headDim);
    positive("intermediate_size", intermediateSize);
    positive("vocab_size", vocabSize);
    positive("max_position_embeddings", maxPositions);
    if (heads % kvHeads != 0) {
      throw new InvalidConfigException("num_key_value_heads " + kvHeads + " does not divide num_attention_heads "
          + heads);
    }
    if (headDim % 8 != 0 || headDim > LlamaKernels.MAX_HEAD_SIZE) {
      throw new InvalidConfigException("head_dim " + headDim + " must be a multiple of 8 and at most "
          + LlamaKernels.MAX_HEAD_SIZE);
    }
    multiple("hidden_size", hiddenSize);
    multiple("intermediate_size", intermediateSize);
    multiple("num_attention_heads * head_dim", (long) heads * headDim);
    if ((long) vocabSize * hiddenSize > Integer.MAX_VALUE || (long) 2 * intermediateSize * hiddenSize
        > Integer.MAX_VALUE) {
      throw new InvalidConfigException("vocab_size or intermediate_size is too large for hidden_size "
          + hiddenSize);
    }
    if (!(rmsNormEps > 0f) || Float.isInfinite(rmsNormEps)) {
      throw new InvalidConfigException("rms_norm_eps must be positive and finite, not " + rmsNormEps);
    }
    if (!(ropeTheta > 1) || Double.isInfinite(ropeTheta)) {
      throw new InvalidConfigException("rope_theta must be finite and above 1, not " + ropeTheta);
    }
    if (ropeScaling != null) {
      RopeScaling s = ropeScaling;
      if (!(s.factor() >= 1) || !(s.lowFreqFactor() > 0) || !(s.highFreqFactor() > s.lowFreqFactor())
          || s.originalMaxPositions() <= 0) {
        throw new InvalidConfigException("rope_scaling (llama3) needs factor >= 1, 0 < low_freq_factor < "
            + "high_freq_factor and original_max_position_embeddings > 0: " + s);
      }
    }
    if (type == null) {
      throw new InvalidConfigException("the weight type is not known (torch_dtype)");
    }
    return this;
  }

  /**
   * Refuses to serve {@code contextLength} positions if the model's sliding window is shorter: the kernels
   * attend over the whole causal prefix.
   */
  public void checkContext(int contextLength) {
    if (slidingWindow > 0 && slidingWindow < contextLength) {
      throw new InvalidConfigException("sliding_window " + slidingWindow + " is shorter than the " + contextLength
          + " positions served (maxTokens); the kernels attend over the whole prefix: serve at most "
          + slidingWindow);
    }
  }

  private static void multiple(String field, long value) {
    if (value % K_MULTIPLE != 0) {
      throw new InvalidConfigException(field + " = " + value + " is not a multiple of " + K_MULTIPLE
          + " (the matmul kernels' K step)");
    }
  }

  // ---- Hugging Face config.json ----

  /** Reads and validates {@code dir/config.json}; a missing dtype is left null for the caller to infer. */
  public static LlamaConfig fromDirectory(Path dir) throws IOException {
    JsonNode json = ConfigJson.read(dir);
    return fromHuggingFace(json, null);
  }

  private static final List<String> MOE_FIELDS = List.of("num_experts", "num_local_experts",
      "num_experts_per_tok", "moe_intermediate_size", "n_routed_experts");

  /**
   * A config from Hugging Face's {@code config.json}, validated. {@code fallbackType} is used when the file
   * names no dtype (the caller infers it from the weights); null then leaves it to the caller.
   *
   * @throws InvalidConfigException naming the field that is missing, mistyped or unsupported
   */
  public static LlamaConfig fromHuggingFace(JsonNode json, HalfType fallbackType) {
    if (json == null || !json.isObject()) {
      throw new InvalidConfigException("a config.json is a JSON object");
    }
    Architecture arch = architecture(json);
    for (String f : MOE_FIELDS) {
      JsonNode v = json.get(f);
      if (v != null && !v.isNull() && !(v.isNumber() && v.asInt() == 0)) {
        throw new InvalidConfigException(f + " = " + v + ": mixture-of-experts models are not supported");
      }
    }
    if (json.has("quantization_config") && !json.get("quantization_config").isNull()) {
      throw new InvalidConfigException("quantization_config is set: quantized weights are not supported");
    }
    String act = json.path("hidden_act").asText("silu");
    if (!act.equals("silu")) {
      throw new InvalidConfigException("hidden_act is '" + act + "'; the kernels implement silu (SwiGLU)");
    }
    refuseTrue(json, "mlp_bias");
    if (arch != Architecture.QWEN2) {
      refuseTrue(json, "attention_bias");
    }
    int c = intField(json, "hidden_size", null);
    int layers = intField(json, "num_hidden_layers", null);
    int heads = intField(json, "num_attention_heads", null);
    int kvHeads = intField(json, "num_key_value_heads", heads);
    int headDim = intField(json, "head_dim", heads > 0 ? c / heads : 0);
    int inter = intField(json, "intermediate_size", null);
    int vocab = intField(json, "vocab_size", null);
    int maxPos = intField(json, "max_position_embeddings", null);
    float eps = (float) doubleField(json, "rms_norm_eps", 1e-6);
    boolean tied = json.path("tie_word_embeddings").asBoolean(false);

    // Rope: transformers 4 writes rope_theta + rope_scaling; transformers 5 writes rope_parameters.
    JsonNode rope = json.get("rope_parameters");
    String ropeField = "rope_parameters";
    if (rope == null || rope.isNull()) {
      rope = json.get("rope_scaling");
      ropeField = "rope_scaling";
    }
    checkFullRotary(json, "partial_rotary_factor");
    double theta = doubleField(json, "rope_theta", 10000.0);
    RopeScaling scaling = null;
    if (rope != null && !rope.isNull()) {
      if (!rope.isObject()) {
        throw new InvalidConfigException(ropeField + " must be an object, not " + rope);
      }
      for (Iterator<String> it = rope.fieldNames(); it.hasNext(); ) {
        String f = it.next();
        if (!ROPE_FIELDS.contains(f)) {
          throw new InvalidConfigException(ropeField + "." + f + " is not supported (per-layer or multimodal rotary "
              + "settings); supported: " + ROPE_FIELDS);
        }
      }
      checkFullRotary(rope, ropeField + ".partial_rotary_factor");
      if (rope.has("rope_theta")) {
        theta = doubleField(rope, "rope_theta", theta);
      }
      String ropeType = rope.path("rope_type").asText(rope.path("type").asText("default"));
      switch (ropeType) {
        case "default" -> { }
        case "llama3" -> scaling = new RopeScaling(doubleField(rope, "factor", null),
            doubleField(rope, "low_freq_factor", null), doubleField(rope, "high_freq_factor", null),
            intField(rope, "original_max_position_embeddings", null));
        default -> throw new InvalidConfigException(ropeField + ".rope_type is '" + ropeType
            + "'; supported: default, llama3");
      }
    }

    int window = 0;
    JsonNode sw = json.get("sliding_window");
    boolean windowOn = arch == Architecture.MISTRAL
        || (arch == Architecture.QWEN2 && json.path("use_sliding_window").asBoolean(false));
    JsonNode layerTypes = json.get("layer_types");
    if (layerTypes != null && layerTypes.isArray()) {
      for (JsonNode t : layerTypes) {
        windowOn |= t.asText().equals("sliding_attention");
      }
    }
    if (windowOn && sw != null && !sw.isNull()) {
      window = intField(json, "sliding_window", null);
    }

    HalfType type = fallbackType;
    JsonNode dtype = json.has("dtype") ? json.get("dtype") : json.get("torch_dtype");
    if (dtype != null && !dtype.isNull()) {
      String field = json.has("dtype") ? "dtype" : "torch_dtype";
      try {
        type = HalfType.parse(dtype.asText());
      } catch (IllegalArgumentException e) {
        throw new InvalidConfigException(field + " is '" + dtype.asText()
            + "'; the kernels take bfloat16 or float16 weights");
      }
    }
    LlamaConfig config = new LlamaConfig("hf", arch, c, layers, heads, kvHeads, headDim, inter, vocab, maxPos, eps,
        theta, scaling, tied, arch == Architecture.QWEN2, window, type);
    return type == null ? config.validateShape() : config.validate();
  }

  private LlamaConfig validateShape() {
    withType(HalfType.BF16).validate();
    return this;
  }

  private static Architecture architecture(JsonNode json) {
    JsonNode archs = json.get("architectures");
    String type = json.path("model_type").asText("");
    for (Architecture a : Architecture.values()) {
      boolean byType = a.modelType.equals(type);
      boolean byClass = archs != null && archs.isArray() && archs.size() > 0
          && archs.get(0).asText().equals(a.className);
      if (byType || (type.isEmpty() && byClass)) {
        if (archs != null && archs.isArray() && archs.size() > 0 && !archs.get(0).asText().equals(a.className)) {
          throw new InvalidConfigException("architectures is " + archs + "; for model_type '" + a.modelType
              + "' only " + a.className + " is supported");
        }
        return a;
      }
    }
    throw new InvalidConfigException("model_type '" + type + "' (architectures " + archs
        + ") is not supported; supported: llama, qwen2, mistral");
  }

  private static final Set<String> ROPE_FIELDS = Set.of("rope_type", "type", "rope_theta", "factor",
      "low_freq_factor", "high_freq_factor", "original_max_position_embeddings", "partial_rotary_factor");

  /** The kernels rotate every dimension of a head: a partial rotary factor other than 1 is refused. */
  private static void checkFullRotary(JsonNode json, String name) {
    JsonNode v = json.get("partial_rotary_factor");
    if (v != null && !v.isNull() && v.asDouble() != 1.0) {
      throw new InvalidConfigException(name + " = " + v + " is not supported; the kernels rotate whole heads");
    }
  }

  private static void refuseTrue(JsonNode json, String field) {
    if (json.path(field).asBoolean(false)) {
      throw new InvalidConfigException(field + " = true is not supported");
    }
  }

  /** This config as Hugging Face's {@code config.json} (transformers 4 spelling, which 5 also reads). */
  public ObjectNode toHuggingFace() {
    ObjectNode o = new ObjectMapper().createObjectNode();
    o.put("model_type", architecture.modelType);
    o.putArray("architectures").add(architecture.className);
    o.put("hidden_size", hiddenSize).put("num_hidden_layers", layers).put("num_attention_heads", heads)
        .put("num_key_value_heads", kvHeads).put("head_dim", headDim).put("intermediate_size", intermediateSize)
        .put("vocab_size", vocabSize).put("max_position_embeddings", maxPositions)
        .put("rms_norm_eps", rmsNormEps).put("rope_theta", ropeTheta).put("hidden_act", "silu")
        .put("tie_word_embeddings", tieEmbeddings).put("torch_dtype", type.torchName());
    if (ropeScaling != null) {
      o.putObject("rope_scaling").put("rope_type", "llama3").put("factor", ropeScaling.factor())
          .put("low_freq_factor", ropeScaling.lowFreqFactor()).put("high_freq_factor", ropeScaling.highFreqFactor())
          .put("original_max_position_embeddings", ropeScaling.originalMaxPositions());
    }
    if (architecture == Architecture.QWEN2) {
      o.put("use_sliding_window", slidingWindow > 0);
    }
    if (slidingWindow > 0) {
      o.put("sliding_window", slidingWindow);
    } else if (architecture != Architecture.LLAMA) {
      o.putNull("sliding_window");
    }
    return o;
  }
}
