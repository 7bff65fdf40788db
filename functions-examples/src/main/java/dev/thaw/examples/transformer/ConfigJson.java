package dev.thaw.examples.transformer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.function.InvalidConfigException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Reading a Hugging Face {@code config.json}, as the GPT-2 and Llama configs do: the file, and its fields with the
 * errors a user can act on (which field is missing or mistyped). What the fields mean stays with each model.
 */
public final class ConfigJson {

  private ConfigJson() {}

  /** {@code dir/config.json}, parsed. */
  public static JsonNode read(Path dir) throws IOException {
    Path file = dir.resolve("config.json");
    if (!Files.isRegularFile(file)) {
      throw new InvalidConfigException(file + " does not exist");
    }
    try {
      return new ObjectMapper().readTree(file.toFile());
    } catch (IOException e) {
      throw new InvalidConfigException(file + " is not JSON: " + e.getMessage(), e);
    }
  }

  /** An integer field; {@code fallback} when it is absent or null (none: it is required). */
  public static int intField(JsonNode json, String field, Integer fallback) {
    JsonNode v = json.get(field);
    if (v == null || v.isNull()) {
      if (fallback != null) {
        return fallback;
      }
      throw new InvalidConfigException("config.json has no '" + field + "'");
    }
    if (!v.isIntegralNumber() || !v.canConvertToInt()) {
      throw new InvalidConfigException("'" + field + "' must be an integer, not " + v);
    }
    return v.asInt();
  }

  /** A number field; {@code fallback} when it is absent or null (none: it is required). */
  public static double doubleField(JsonNode json, String field, Double fallback) {
    JsonNode v = json.get(field);
    if (v == null || v.isNull()) {
      if (fallback != null) {
        return fallback;
      }
      throw new InvalidConfigException("config.json has no '" + field + "'");
    }
    if (!v.isNumber()) {
      throw new InvalidConfigException("'" + field + "' must be a number, not " + v);
    }
    return v.asDouble();
  }

  public static void positive(String field, int value) {
    if (value <= 0) {
      throw new InvalidConfigException(field + " must be positive, not " + value);
    }
  }
}
