package dev.thaw.server;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * One cold start in {@code /v1/functions/{name}/trace}, checked as Chrome trace: the scheduler's rows (request,
 * instance) and, for a pool-backed start, the worker's rows the server attached (BECOME phases on tid 10, copies on
 * the restore stream's tid 12).
 *
 * @param title the cold start's process name ({@code "f cold start #2 on device 1"})
 * @param events its events
 */
record ColdStartTrace(String title, List<JsonNode> events) {

  /** The spans ({@code ph: X}) on row {@code tid}. */
  List<JsonNode> spans(int tid) {
    return events.stream().filter(e -> e.path("tid").asInt() == tid && e.path("ph").asText().equals("X")).toList();
  }

  JsonNode span(int tid, String name) {
    return spans(tid).stream().filter(e -> e.path("name").asText().equals(name)).findFirst()
        .orElseThrow(() -> new AssertionError("no span '" + name + "' on row " + tid + " of " + title + ": " + events));
  }

  /** Names of the spans on the worker's BECOME row, in order. */
  List<String> becomeRow() {
    return spans(10).stream().map(e -> e.path("name").asText()).toList();
  }

  /** Bytes in the copy spans on the restore stream's row. */
  long copiedBytes() {
    return spans(12).stream().mapToLong(e -> e.path("args").path("bytes").asLong()).sum();
  }

  /**
   * Waits for the latest cold start of {@code function} whose worker timeline has arrived (it comes once the restore
   * is resident), checking the whole trace is valid Chrome trace JSON each time.
   */
  static ColdStartTrace awaitWorkerRows(int port, String function, int coldStarts) throws Exception {
    ColdStartTrace last = null;
    for (int i = 0; i < 3000; i++) {
      List<ColdStartTrace> all = read(port, function);
      if (all.size() >= coldStarts) {
        last = all.get(coldStarts - 1);
        if (!last.spans(10).isEmpty() && !last.spans(12).isEmpty()) {
          return last;
        }
      }
      Thread.sleep(10);
    }
    throw new AssertionError("cold start #" + coldStarts + " of " + function + " never got its worker's rows: " + last);
  }

  /** Every cold start in the trace, oldest first; fails unless the JSON is a valid Chrome trace. */
  static List<ColdStartTrace> read(int port, String function) throws Exception {
    JsonNode root = json(get(port, "/v1/functions/" + function + "/trace"));
    assertTrue(root.path("traceEvents").isArray(), root.toString());
    List<ColdStartTrace> out = new ArrayList<>();
    int pid = -1;
    for (JsonNode e : root.get("traceEvents")) {
      String ph = e.path("ph").asText();
      assertTrue(Set.of("X", "i", "M").contains(ph), "a phase Chrome trace knows: " + e);
      assertTrue(e.path("name").isTextual() && e.path("pid").isInt() && e.path("tid").isInt(), e.toString());
      if (ph.equals("M")) {
        assertTrue(e.path("args").path("name").isTextual(), e.toString());
      } else {
        assertTrue(e.path("ts").isNumber() && e.get("ts").asDouble() >= 0, "a time after the server started: " + e);
      }
      if (ph.equals("X")) {
        assertTrue(e.path("dur").isNumber() && e.get("dur").asDouble() >= 0, e.toString());
      }
      if (ph.equals("M") && e.path("name").asText().equals("process_name")) {
        pid = e.get("pid").asInt();
        out.add(new ColdStartTrace(e.get("args").get("name").asText(), new ArrayList<>()));
      }
      assertEquals(pid, e.get("pid").asInt(), "a cold start's events follow its process name");
      out.get(out.size() - 1).events().add(e);
    }
    return out;
  }
}
