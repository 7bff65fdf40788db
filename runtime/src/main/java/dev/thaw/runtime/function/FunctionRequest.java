package dev.thaw.runtime.function;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import java.nio.ByteBuffer;
import java.util.Optional;

/**
 * One request: a JSON body, and optionally raw bytes beside it for large binary input.
 *
 * @param json the request body (an object)
 * @param binary raw bytes sent beside the JSON, read-only; empty when none
 */
public record FunctionRequest(JsonNode json, Optional<ByteBuffer> binary) {

  public FunctionRequest {
    if (json == null) {
      throw new IllegalArgumentException("a request needs a JSON body");
    }
    binary = binary.map(ByteBuffer::asReadOnlyBuffer);
  }

  public static FunctionRequest of(JsonNode json) {
    return new FunctionRequest(json, Optional.empty());
  }

  public static FunctionRequest empty() {
    return of(JsonNodeFactory.instance.objectNode());
  }
}
