package dev.thaw.examples.gpt2;

import static dev.thaw.examples.transformer.ConfigJson.intField;
import static dev.thaw.examples.transformer.ConfigJson.positive;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.transformer.ConfigJson;
import dev.thaw.runtime.function.InvalidConfigException;
import java.io.IOException;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;

/**
 * A GPT-2 model's shape: what Hugging Face's {@code config.json} says, restricted to what the kernels run.
 *
 * <p>Named configs are the four released sizes and small ones for tests. {@link #validate()} holds every
 * limit the kernels have: the embedding (and so 3C and 4C) a multiple of 16 for the tensor-core matmuls, a
 * head size that is a multiple of 8 and at most 128, a context of at most 1024 positions.
 *
 * @param name a label: the named config, or {@code "hf"} for one read from a file
 * @param nEmbd C, the embedding width
 * @param nLayer transformer blocks
 * @param nHead H, attention heads; C / H is the head size D
 * @param nPositions the longest context (rows of {@code wpe})
 * @param vocabSize V (rows of {@code wte})
 * @param layerNormEpsilon added to the variance in every layer norm
 */
public record Gpt2Config(String name, int nEmbd, int nLayer, int nHead, int nPositions, int vocabSize,
    float layerNormEpsilon) {

  public static final float DEFAULT_LAYER_NORM_EPSILON = 1e-5f;
  /** The kernels' limits (see {@code Gpt2Kernels}): matmul tile, head size, context. */
  public static final int TILE = 16;
  public static final int MAX_HEAD_SIZE = 128;
  public static final int MAX_CONTEXT = 1024;

  private static final Map<String, Gpt2Config> NAMED = new LinkedHashMap<>();

  static {
    named("gpt2", 768, 12, 12, 1024, 50257);
    named("gpt2-medium", 1024, 24, 16, 1024, 50257);
    named("gpt2-large", 1280, 36, 20, 1024, 50257);
    named("gpt2-xl", 1600, 48, 25, 1024, 50257);
    // For tests: small enough to run on the sim device and the CPU reference in milliseconds.
    named("tiny", 64, 2, 4, 64, 97);
    named("tiny-wide", 128, 3, 2, 128, 251);
  }

  private static void named(String name, int c, int layers, int heads, int ctx, int vocab) {
    NAMED.put(name, new Gpt2Config(name, c, layers, heads, ctx, vocab, DEFAULT_LAYER_NORM_EPSILON));
  }

  /** The names {@link #named(String)} knows. */
  public static Set<String> names() {
    return NAMED.keySet();
  }

  /**
   * A named config.
   *
   * @throws InvalidConfigException if there is none by that name
   */
  public static Gpt2Config named(String name) {
    Gpt2Config c = NAMED.get(name);
    if (c == null) {
      throw new InvalidConfigException("no GPT-2 config named '" + name + "'; known: " + NAMED.keySet());
    }
    return c;
  }

  /** C / H. */
  public int headSize() {
    return nEmbd / nHead;
  }

  /** Parameters, counting wte once (the LM head is tied to it). */
  public long parameterCount() {
    long c = nEmbd;
    long perLayer = 4 * c + (c * 3 * c + 3 * c) + (c * c + c) + (c * 4 * c + 4 * c) + (4 * c * c + c);
    return (long) vocabSize * c + (long) nPositions * c + nLayer * perLayer + 2 * c;
  }

  /**
   * This config if the kernels can run it.
   *
   * @throws InvalidConfigException naming the first field that is out of range
   */
  public Gpt2Config validate() {
    positive("n_embd", nEmbd);
    positive("n_layer", nLayer);
    positive("n_head", nHead);
    positive("n_positions", nPositions);
    positive("vocab_size", vocabSize);
    if (nEmbd % nHead != 0) {
      throw new InvalidConfigException("n_head " + nHead + " does not divide n_embd " + nEmbd);
    }
    if (nEmbd % TILE != 0) {
      throw new InvalidConfigException("n_embd " + nEmbd + " is not a multiple of " + TILE
          + " (the matmul kernels' tile)");
    }
    int d = headSize();
    if (d % 8 != 0 || d > MAX_HEAD_SIZE) {
      throw new InvalidConfigException("head size n_embd / n_head = " + d + " must be a multiple of 8 and at most "
          + MAX_HEAD_SIZE);
    }
    if (nPositions > MAX_CONTEXT) {
      throw new InvalidConfigException("n_positions " + nPositions + " exceeds the attention kernel's "
          + MAX_CONTEXT);
    }
    if ((long) vocabSize * nEmbd > Integer.MAX_VALUE / 2) {
      throw new InvalidConfigException("vocab_size " + vocabSize + " × n_embd " + nEmbd + " is too large");
    }
    if (!(layerNormEpsilon > 0f) || Float.isInfinite(layerNormEpsilon)) {
      throw new InvalidConfigException("layer_norm_epsilon must be positive and finite, not " + layerNormEpsilon);
    }
    return this;
  }

  /** Reads and validates {@code dir/config.json}. */
  public static Gpt2Config fromDirectory(Path dir) throws IOException {
    JsonNode json = ConfigJson.read(dir);
    return fromHuggingFace(json);
  }

  /**
   * A config from Hugging Face's {@code config.json} for {@code GPT2LMHeadModel}, validated. Settings that
   * would change the math the kernels do (another activation, unscaled or layer-scaled attention, cross
   * attention, an MLP width other than 4C) are refused rather than ignored.
   *
   * @throws InvalidConfigException naming the field that is missing, mistyped or unsupported
   */
  public static Gpt2Config fromHuggingFace(JsonNode json) {
    if (json == null || !json.isObject()) {
      throw new InvalidConfigException("a GPT-2 config.json is a JSON object");
    }
    JsonNode type = json.get("model_type");
    if (type != null && !type.asText().equals("gpt2")) {
      throw new InvalidConfigException("model_type is '" + type.asText() + "', not 'gpt2'");
    }
    int c = intField(json, "n_embd", null);
    int layers = intField(json, "n_layer", null);
    int heads = intField(json, "n_head", null);
    Integer ctxDefault = json.has("n_ctx") ? intField(json, "n_ctx", null) : null;
    int ctx = intField(json, "n_positions", ctxDefault);
    int vocab = intField(json, "vocab_size", null);
    float eps = DEFAULT_LAYER_NORM_EPSILON;
    JsonNode epsNode = json.get("layer_norm_epsilon");
    if (epsNode != null) {
      if (!epsNode.isNumber()) {
        throw new InvalidConfigException("layer_norm_epsilon must be a number, not " + epsNode);
      }
      eps = epsNode.floatValue();
    }
    String act = json.path("activation_function").asText("gelu_new");
    if (!act.equals("gelu_new")) {
      throw new InvalidConfigException("activation_function is '" + act + "'; the kernels implement gelu_new");
    }
    JsonNode inner = json.get("n_inner");
    if (inner != null && !inner.isNull() && inner.asLong() != 4L * c) {
      throw new InvalidConfigException("n_inner is " + inner + "; the kernels need 4 * n_embd = " + 4L * c);
    }
    refuseFlag(json, "scale_attn_weights", true);
    refuseFlag(json, "scale_attn_by_inverse_layer_idx", false);
    refuseFlag(json, "add_cross_attention", false);
    return new Gpt2Config("hf", c, layers, heads, ctx, vocab, eps).validate();
  }

  private static void refuseFlag(JsonNode json, String field, boolean supported) {
    JsonNode v = json.get(field);
    if (v != null && !v.isNull() && v.asBoolean(supported) != supported) {
      throw new InvalidConfigException(field + " = " + v + " is not supported; the kernels need " + supported);
    }
  }

  /** This config as Hugging Face's {@code config.json} for {@code GPT2LMHeadModel} (fp16 weights). */
  public ObjectNode toHuggingFace() {
    ObjectNode o = new ObjectMapper().createObjectNode();
    o.put("model_type", "gpt2");
    o.putArray("architectures").add("GPT2LMHeadModel");
    o.put("n_embd", nEmbd).put("n_layer", nLayer).put("n_head", nHead).put("n_positions", nPositions)
        .put("n_ctx", nPositions).put("vocab_size", vocabSize).put("layer_norm_epsilon", layerNormEpsilon)
        .put("activation_function", "gelu_new").putNull("n_inner");
    o.put("tie_word_embeddings", true).put("torch_dtype", "float16");
    return o;
  }
}
