package dev.thaw.image;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * How Thaw reads the JSON a user or an archive hands it (configs, requests, manifests): one value and nothing
 * after it, no key twice. Jackson's defaults take the last of two equal keys and ignore what follows the
 * value, so {@code {"n": 1, "n": 2}} or {@code {"n": 1} {"n": 2}} would silently mean something.
 */
public final class StrictJson {

  private static final ObjectMapper MAPPER = configure(new ObjectMapper());

  private StrictJson() {}

  /** Turns the two checks on in {@code mapper}; returns it. */
  public static ObjectMapper configure(ObjectMapper mapper) {
    return mapper.enable(JsonParser.Feature.STRICT_DUPLICATE_DETECTION)
        .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);
  }

  /**
   * Reads one JSON value.
   *
   * @throws JsonProcessingException if it is not JSON, has a key twice or anything after the value; {@link
   *     #problem} words it
   */
  public static JsonNode read(String text) throws JsonProcessingException {
    return MAPPER.readTree(text);
  }

  /**
   * The first line of Jackson's own message, without its source location nor the Java type the value was bound to
   * (a trailing token's message names both).
   */
  public static String problem(JsonProcessingException e) {
    String m = e.getOriginalMessage();
    if (m == null) {
      return "malformed JSON";
    }
    String line = m.lines().findFirst().orElse(m);
    int bound = line.indexOf(" (bound as ");
    return bound < 0 ? line : line.substring(0, bound);
  }
}
