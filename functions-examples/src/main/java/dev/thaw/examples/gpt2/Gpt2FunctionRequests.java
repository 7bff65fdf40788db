package dev.thaw.examples.gpt2;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

/** Builds {@link Gpt2Function} request bodies. */
public final class Gpt2FunctionRequests {

  private Gpt2FunctionRequests() {}

  /** {@code {"tokens": prompts, "maxNewTokens": n, "returnLogits": logits}}. */
  public static ObjectNode of(int[][] prompts, int maxNewTokens, boolean returnLogits) {
    ObjectNode r = JsonNodeFactory.instance.objectNode();
    ArrayNode all = r.putArray("tokens");
    for (int[] p : prompts) {
      ArrayNode row = all.addArray();
      for (int t : p) {
        row.add(t);
      }
    }
    return r.put("maxNewTokens", maxNewTokens).put("returnLogits", returnLogits);
  }
}
