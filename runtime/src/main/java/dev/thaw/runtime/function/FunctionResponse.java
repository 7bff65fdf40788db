package dev.thaw.runtime.function;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.ByteBuffer;
import java.util.Optional;

/**
 * One response: a JSON body, and optionally raw bytes beside it.
 *
 * @param json the response body
 * @param binary raw bytes returned beside the JSON; empty when none
 */
public record FunctionResponse(JsonNode json, Optional<ByteBuffer> binary) {

  public FunctionResponse {
    if (json == null) {
      throw new IllegalArgumentException("a response needs a JSON body");
    }
  }

  public static FunctionResponse of(JsonNode json) {
    return new FunctionResponse(json, Optional.empty());
  }
}
