package dev.thaw.examples.gpt2;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.function.TokenRequest;

/** Builds {@link Gpt2Function} request bodies. */
public final class Gpt2FunctionRequests {

  private Gpt2FunctionRequests() {}

  /** {@code {"tokens": prompts, "maxNewTokens": n, "returnLogits": logits}}. */
  public static ObjectNode of(int[][] prompts, int maxNewTokens, boolean returnLogits) {
    return TokenRequest.body(prompts, maxNewTokens, returnLogits);
  }
}
