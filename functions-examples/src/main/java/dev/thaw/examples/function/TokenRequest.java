package dev.thaw.examples.function;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.InvalidRequestException;
import java.util.Iterator;
import java.util.Set;

/**
 * A checked generation request of the language-model examples: prompts of token ids, how many tokens to add
 * greedily, and whether to return the last step's logits.
 *
 * <pre>{@code {"tokens": [[464, 2068, 7586], [15496, 11]], "maxNewTokens": 16, "returnLogits": false}}</pre>
 */
public record TokenRequest(int[][] prompts, int maxNewTokens, boolean returnLogits, Sampling sampling) {

  public TokenRequest(int[][] prompts, int maxNewTokens, boolean returnLogits) {
    this(prompts, maxNewTokens, returnLogits, Sampling.GREEDY);
  }

  public static final int DEFAULT_MAX_NEW_TOKENS = 16;

  /** The limits a request is checked against. */
  public record Limits(int maxBatch, int maxTokens, int vocabSize) {}

  /**
   * Checks {@code json} against {@code limits}.
   *
   * @param fields the top-level fields allowed ({@code tokens}, {@code maxNewTokens}, {@code returnLogits}, those of
   *     {@link Sampling#FIELDS} when the caller samples, and any the caller handles itself)
   * @throws InvalidRequestException naming the first thing that is wrong
   */
  public static TokenRequest parse(JsonNode json, Set<String> fields, Limits limits) {
    if (json == null || !json.isObject()) {
      throw new InvalidRequestException("the request is a JSON object with 'tokens'");
    }
    for (Iterator<String> it = json.fieldNames(); it.hasNext(); ) {
      String f = it.next();
      if (!fields.contains(f)) {
        throw new InvalidRequestException("unknown field '" + f + "'; known: " + fields);
      }
    }
    int maxNew = DEFAULT_MAX_NEW_TOKENS;
    JsonNode n = json.get("maxNewTokens");
    if (n != null) {
      if (!n.isIntegralNumber() || !n.canConvertToInt() || n.asInt() < 0) {
        throw new InvalidRequestException("'maxNewTokens' must be an integer of at least 0, not " + n);
      }
      maxNew = n.asInt();
    }
    boolean returnLogits = false;
    JsonNode r = json.get("returnLogits");
    if (r != null) {
      if (!r.isBoolean()) {
        throw new InvalidRequestException("'returnLogits' must be true or false, not " + r);
      }
      returnLogits = r.asBoolean();
    }
    JsonNode tokens = json.get("tokens");
    if (tokens == null || !tokens.isArray()) {
      throw new InvalidRequestException("'tokens' must be a list of prompts, each a list of token ids");
    }
    for (int b = 0; b < tokens.size(); b++) {
      if (!tokens.get(b).isArray()) {
        throw new InvalidRequestException("prompt " + b + " must be a list of token ids, not "
            + tokens.get(b).getNodeType());
      }
    }
    if (tokens.size() == 0 || tokens.size() > limits.maxBatch()) {
      throw new InvalidRequestException("'tokens' holds " + tokens.size() + " prompts; 1 to " + limits.maxBatch()
          + " (maxBatch) are allowed");
    }
    int vocab = limits.vocabSize();
    int[][] prompts = new int[tokens.size()][];
    for (int b = 0; b < prompts.length; b++) {
      JsonNode p = tokens.get(b);
      if (p.size() == 0) {
        throw new InvalidRequestException("prompt " + b + " is empty");
      }
      if ((long) p.size() + maxNew > limits.maxTokens()) {
        throw new InvalidRequestException("prompt " + b + " has " + p.size() + " tokens; with " + maxNew
            + " new tokens that exceeds the " + limits.maxTokens() + " positions of the KV cache (maxTokens)");
      }
      prompts[b] = new int[p.size()];
      for (int t = 0; t < p.size(); t++) {
        JsonNode id = p.get(t);
        if (!id.isIntegralNumber() || !id.canConvertToInt() || id.asInt() < 0 || id.asInt() >= vocab) {
          throw new InvalidRequestException("prompt " + b + ", position " + t + ": " + id
              + " is not a token id in [0, " + vocab + ")");
        }
        prompts[b][t] = id.asInt();
      }
    }
    Sampling sampling = fields.containsAll(Sampling.FIELDS) ? Sampling.parse(json, vocab) : Sampling.GREEDY;
    return new TokenRequest(prompts, maxNew, returnLogits, sampling);
  }

  /** A request body: {@code {"tokens": prompts, "maxNewTokens": n, "returnLogits": logits}}. */
  public static ObjectNode body(int[][] prompts, int maxNewTokens, boolean returnLogits) {
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
