package dev.thaw.cli;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.module.SimpleModule;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.ser.std.ToStringSerializer;
import dev.thaw.image.store.Digest;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

/** The CLI's JSON output: pretty-printed, with unmeasured figures ({@code NaN}) as {@code null}. */
final class Json {

  static final ObjectMapper MAPPER = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT)
      // A digest prints as it reads everywhere else: sha256:<hex>.
      .registerModule(new SimpleModule("thaw-digest").addSerializer(Digest.class, ToStringSerializer.instance));

  private Json() {}

  static ObjectNode tree(Object value) {
    return nullNotANumber(MAPPER.valueToTree(value));
  }

  static String write(JsonNode node) {
    try {
      return MAPPER.writeValueAsString(node);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }

  /** JSON has no NaN; a figure the run did not reach is null. */
  private static ObjectNode nullNotANumber(ObjectNode node) {
    List<String> nan = new ArrayList<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = node.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> field = it.next();
      JsonNode v = field.getValue();
      if (v.isFloatingPointNumber() && Double.isNaN(v.doubleValue())) {
        nan.add(field.getKey());
      } else if (v.isObject()) {
        nullNotANumber((ObjectNode) v);
      } else if (v.isArray()) {
        v.forEach(e -> {
          if (e.isObject()) {
            nullNotANumber((ObjectNode) e);
          }
        });
      }
    }
    nan.forEach(node::putNull);
    return node;
  }
}
