package dev.thaw.bench.coldstart;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Deque;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

/**
 * The spans of a Chrome-trace JSON file (what Perfetto and chrome://tracing open): complete events
 * ({@code "ph": "X"} with {@code ts} and {@code dur} in microseconds) and begin/end pairs ({@code "B"}/{@code "E"}
 * on one thread), one lane per thread, named by its {@code thread_name} metadata event when it has one. Times
 * are made relative to the first span.
 *
 * @param source the file, for titles
 * @param spans every span, by start time
 */
record ChromeTrace(String source, List<Span> spans) {

  /** Where a run keeps the traces its contenders fetched, in its output folder. */
  static final String FOLDER = "traces";

  /**
   * One span.
   *
   * @param process the event's {@code pid}: one cold start, in the server's traces
   * @param lane the thread it ran on (a stream, for a GPU trace)
   * @param name the event's name: what colours it
   * @param category its {@code cat}, or its name when it has none
   */
  record Span(String process, String lane, String name, String category, double startMillis, double endMillis) {}

  static ChromeTrace read(Path file) throws IOException {
    JsonNode root = ColdStartResult.JSON.readTree(file.toFile());
    JsonNode events = root.isArray() ? root : root.path("traceEvents");
    if (!events.isArray()) {
      throw new IOException(file + " is not a Chrome trace: no traceEvents array");
    }
    Map<String, String> threadNames = new HashMap<>();
    for (JsonNode e : events) {
      if ("M".equals(e.path("ph").asText()) && "thread_name".equals(e.path("name").asText())) {
        threadNames.put(thread(e), e.path("args").path("name").asText(thread(e)));
      }
    }
    List<Span> spans = new ArrayList<>();
    Map<String, Deque<JsonNode>> open = new HashMap<>();
    for (JsonNode e : events) {
      String ph = e.path("ph").asText();
      String lane = threadNames.getOrDefault(thread(e), thread(e));
      switch (ph) {
        case "X" -> spans.add(span(lane, e, e.path("ts").asDouble(), e.path("ts").asDouble() + e.path("dur").asDouble()));
        case "B" -> open.computeIfAbsent(thread(e), k -> new ArrayDeque<>()).push(e);
        case "E" -> {
          Deque<JsonNode> stack = open.get(thread(e));
          if (stack != null && !stack.isEmpty()) {
            JsonNode b = stack.pop();
            spans.add(span(lane, b, b.path("ts").asDouble(), e.path("ts").asDouble()));
          }
        }
        default -> { }
      }
    }
    double t0 = spans.stream().mapToDouble(Span::startMillis).min().orElse(0);
    List<Span> relative = spans.stream()
        .map(s -> new Span(s.process(), s.lane(), s.name(), s.category(), s.startMillis() - t0, s.endMillis() - t0))
        .sorted(Comparator.comparingDouble(Span::startMillis)).toList();
    return new ChromeTrace(file.getFileName().toString(), relative);
  }

  private static Span span(String lane, JsonNode e, double startMicros, double endMicros) {
    String name = e.path("name").asText("");
    String cat = e.path("cat").asText("");
    return new Span(e.path("pid").asText("0"), lane, name, cat.isEmpty() ? name : cat, startMicros / 1e3,
        endMicros / 1e3);
  }

  private static String thread(JsonNode e) {
    return e.path("pid").asText("0") + "/" + e.path("tid").asText("0");
  }

  /**
   * Only the spans of the process whose first span starts last (the last cold start of a server's trace), made
   * relative to its own first span; the trace itself when it has one process.
   */
  ChromeTrace lastProcess() {
    if (spans.isEmpty()) {
      return this;
    }
    String last = spans.get(spans.size() - 1).process();
    String newest = spans.stream().filter(s -> !s.process().equals(last)).findAny().isEmpty() ? last
        : spans.stream().collect(Collectors.groupingBy(Span::process,
            Collectors.summarizingDouble(Span::startMillis))).entrySet().stream()
            .max(Comparator.comparingDouble(e -> e.getValue().getMin())).orElseThrow().getKey();
    double t0 = spans.stream().filter(s -> s.process().equals(newest)).mapToDouble(Span::startMillis).min().orElse(0);
    return new ChromeTrace(source + ", its last cold start", spans.stream().filter(s -> s.process().equals(newest))
        .map(s -> new Span(s.process(), s.lane(), s.name(), s.category(), s.startMillis() - t0, s.endMillis() - t0))
        .toList());
  }

  /** The lanes, in the order their first span starts. */
  List<String> lanes() {
    LinkedHashSet<String> lanes = new LinkedHashSet<>();
    spans.forEach(s -> lanes.add(s.lane()));
    return List.copyOf(lanes);
  }
}
