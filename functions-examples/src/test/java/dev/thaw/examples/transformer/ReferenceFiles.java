package dev.thaw.examples.transformer;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * Reference files in the format of the models' {@code hf_reference.py}, made from a CPU reference's answers, and
 * the verdicts every compare tool owes on them: the right answer passes, a wrong token fails, the same token at a
 * near-tie passes, and wrong logits fail.
 */
public final class ReferenceFiles {

  public static final ObjectMapper JSON = new ObjectMapper();

  private ReferenceFiles() {}

  /** Runs a compare tool on {@code reference} (written as {@code name}.json) and gives its exit code. */
  @FunctionalInterface
  public interface Compare {
    int run(JsonNode reference, String name) throws Exception;
  }

  /**
   * A reference of model {@code tiny}: {@code logits} are the prompts' last-position logits and {@code tokens} the
   * greedy continuation of {@code newTokens} ids, with every step's top-2 gap 1.0 (no near-ties).
   */
  public static ObjectNode reference(int[][] prompts, int newTokens, float[][] logits, int[][] tokens) {
    ObjectNode r = JSON.createObjectNode().put("model", "tiny").put("max_new_tokens", newTokens);
    r.set("prompts", JSON.valueToTree(prompts));
    r.set("forward_logits", JSON.valueToTree(logits));
    r.set("generated", JSON.valueToTree(tokens));
    ArrayNode gaps = r.putArray("generate_step_gaps");
    for (int[] p : prompts) {
      ArrayNode row = gaps.addArray();
      for (int i = 0; i < newTokens; i++) {
        row.add(1.0);
      }
    }
    return r;
  }

  /**
   * A wrong token fails, the same token where the reference's top-2 gap is a near-tie passes, and the first
   * sequence's logits scaled by 1.5 fail. Gives that last (wrong-logits) reference, for a model's own checks.
   */
  public static ObjectNode assertVerdicts(ObjectNode ref, Compare compare) throws Exception {
    ObjectNode wrong = ref.deepCopy();
    ArrayNode seq = (ArrayNode) wrong.get("generated").get(1);
    seq.set(2, seq.get(2).asInt() == 0 ? 1 : 0);
    assertEquals(1, compare.run(wrong, "wrong"));

    ((ArrayNode) wrong.get("generate_step_gaps").get(1)).set(2, 0.001);
    assertEquals(0, compare.run(wrong, "tie"));

    ObjectNode badLogits = ref.deepCopy();
    ArrayNode logits = (ArrayNode) badLogits.get("forward_logits").get(0);
    for (int v = 0; v < logits.size(); v++) {
      logits.set(v, logits.get(v).asDouble() * 1.5);
    }
    assertEquals(1, compare.run(badLogits, "logits"));
    return badLogits;
  }
}
