package dev.thaw.bench.coldstart;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/** The JSON objects a child printed on stdout, one a line; other lines (a library's chatter) are passed over. */
final class Lines {

  private Lines() {}

  static List<JsonNode> all(String stdout) {
    List<JsonNode> out = new ArrayList<>();
    for (String line : stdout.split("\n")) {
      String t = line.strip();
      if (!t.startsWith("{")) {
        continue;
      }
      try {
        out.add(ColdStartResult.JSON.readTree(t));
      } catch (JsonProcessingException e) {
        // Not one of ours: a line that merely starts with a brace.
      }
    }
    return out;
  }

  /** The last JSON object printed, or an IOException naming what was printed instead. */
  static JsonNode last(String stdout) throws IOException {
    List<JsonNode> all = all(stdout);
    if (all.isEmpty()) {
      throw new IOException("printed no JSON line: " + abbreviate(stdout));
    }
    return all.get(all.size() - 1);
  }

  static String abbreviate(String text) {
    String t = text.strip().replace('\n', ' ');
    return t.length() <= 300 ? t : t.substring(0, 300) + "...";
  }
}
