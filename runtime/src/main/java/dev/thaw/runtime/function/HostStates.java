package dev.thaw.runtime.function;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/** Writes a function's host state to JSON and reads it back: how it travels in an image. */
public final class HostStates {

  private static final ObjectMapper JSON = new ObjectMapper()
      .enable(DeserializationFeature.FAIL_ON_NULL_FOR_PRIMITIVES);

  private HostStates() {}

  /** The state as a JSON tree. */
  public static JsonNode write(Object state) {
    return JSON.valueToTree(state);
  }

  /**
   * The state read back from {@code json}.
   *
   * @throws IllegalArgumentException if the JSON does not make a {@code type}, saying why
   */
  public static <S> S read(JsonNode json, Class<S> type) {
    try {
      return JSON.treeToValue(json, type);
    } catch (JsonProcessingException | IllegalArgumentException e) {
      String why = e instanceof JsonProcessingException j ? j.getOriginalMessage() : e.getMessage();
      throw new IllegalArgumentException("host state is not a " + type.getSimpleName() + ": " + why, e);
    }
  }
}
