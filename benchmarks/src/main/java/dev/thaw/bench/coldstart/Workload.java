package dev.thaw.bench.coldstart;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.gpt2.Gpt2Config;
import dev.thaw.examples.gpt2.Gpt2Function;
import dev.thaw.examples.mlp.MlpFunction;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

/**
 * A model every contender cold-starts, and the one request each is asked: GPT-2 (a 16-token prompt, one new
 * token) or the MLP (one batch). The same weights file serves every contender, so their answers must agree:
 * {@link #answerOf} reads Thaw's answer from its response in the form the PyTorch side prints it.
 *
 * @param name the model's name on the command line ({@link #names()})
 * @param kind what runs it
 * @param gpt2 GPT-2's shape, for {@link Kind#GPT2}
 */
public record Workload(String name, Kind kind, Gpt2Config gpt2) {

  /** Which function and which PyTorch code run a workload. */
  public enum Kind {
    MLP("mlp"), GPT2("gpt2");

    /** The name the PyTorch side ({@code coldstart.py --kind}) knows it by. */
    public final String pythonKind;

    Kind(String pythonKind) {
      this.pythonKind = pythonKind;
    }
  }

  /** The MLP's widths: a classifier of 784 inputs, 670 k parameters (2.7 MB in fp32). */
  public static final List<Integer> MLP_LAYERS = List.of(784, 512, 512, 10);
  public static final long MLP_SEED = 42;
  public static final int MLP_ROWS = 8;
  /** The GPT-2 prompt (the GPU runs in docs/gpu-runs used it too); tiny models take each id modulo their vocabulary. */
  public static final int[] PROMPT = {15718, 20896, 46414, 19723, 24521, 404, 19748, 16241, 3185, 40007, 45275,
      21281, 39983, 5076, 24913, 29307};
  /** KV cache and batch Thaw's image holds: one sequence of the prompt and the new token, with room to spare. */
  public static final int GPT2_MAX_TOKENS = 64;

  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
  private static final Map<String, Workload> NAMED = new LinkedHashMap<>();

  static {
    NAMED.put("mlp", new Workload("mlp", Kind.MLP, null));
    for (String size : List.of("gpt2-tiny", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")) {
      Gpt2Config c = Gpt2Config.named(size.equals("gpt2-tiny") ? "tiny" : size);
      NAMED.put(size, new Workload(size, Kind.GPT2, c));
    }
  }

  /** Every model the harness knows, smallest first ({@code gpt2-tiny} is for tests on the sim device). */
  public static List<String> names() {
    return List.copyOf(NAMED.keySet());
  }

  /**
   * The model of that name.
   *
   * @throws IllegalArgumentException naming the models there are
   */
  public static Workload named(String name) {
    Workload w = NAMED.get(name);
    if (w == null) {
      throw new IllegalArgumentException("no model '" + name + "'; known: " + String.join(", ", NAMED.keySet()));
    }
    return w;
  }

  /** The request: Thaw's request JSON, which the PyTorch side reads too. */
  public ObjectNode request() {
    ObjectNode r = NODES.objectNode();
    if (kind == Kind.GPT2) {
      ArrayNode prompt = r.putArray("tokens").addArray();
      for (int id : PROMPT) {
        prompt.add(id % gpt2.vocabSize());
      }
      r.put("maxNewTokens", 1);
    } else {
      SplittableRandom random = new SplittableRandom(7);
      ArrayNode rows = r.putArray("inputs");
      for (int i = 0; i < MLP_ROWS; i++) {
        ArrayNode row = rows.addArray();
        for (int j = 0; j < MLP_LAYERS.get(0); j++) {
          row.add((float) (2 * random.nextDouble() - 1));
        }
      }
    }
    return r;
  }

  /** The function class {@code thaw build} runs. */
  public String functionClass() {
    return kind == Kind.GPT2 ? Gpt2Function.class.getName() : MlpFunction.class.getName();
  }

  /** Thaw's config: the GPT-2 weights from {@code weights} (a Hugging Face directory); the MLP's from its seed. */
  public ObjectNode thawConfig(Path weights) {
    ObjectNode c = NODES.objectNode();
    if (kind == Kind.GPT2) {
      c.put("path", weights.toString()).put("maxBatch", 1).put("maxTokens", GPT2_MAX_TOKENS);
    } else {
      ArrayNode layers = c.putArray("layers");
      MLP_LAYERS.forEach(layers::add);
      c.put("seed", MLP_SEED).put("maxBatch", MLP_ROWS);
    }
    return c;
  }

  /**
   * The answer in a Thaw response, as the PyTorch side prints it: {@code {"tokens": [[id]]}} for GPT-2,
   * {@code {"argmax": [...]}} for the MLP.
   */
  public ObjectNode answerOf(JsonNode response) {
    ObjectNode a = NODES.objectNode();
    String field = kind == Kind.GPT2 ? "tokens" : "argmax";
    JsonNode value = response.get(field);
    if (value == null) {
      throw new IllegalArgumentException("the response has no '" + field + "': " + response);
    }
    a.set(field, value);
    return a;
  }
}
