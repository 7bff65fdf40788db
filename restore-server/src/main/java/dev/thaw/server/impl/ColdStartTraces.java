package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayDeque;
import java.util.Map;

/**
 * The timelines of a function's recent cold starts, as Chrome trace events (Perfetto and chrome://tracing open
 * them): per request, one row for the request (queue, invoke) and one for the instance's start (acquire, map,
 * restore-wait). Times are microseconds since the server started. Thread-safe.
 */
final class ColdStartTraces {

  /**
   * Copy spans (and launches) kept per restore timeline: a 16 GB image queues thousands of copies, which the
   * restore's trace coalesces to this many spans (saying so in the trace), so one cold start stays ~100 KB.
   */
  static final int MAX_SPANS = 512;

  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

  private final int kept;
  private final long epochNanos;
  private final ArrayDeque<ArrayNode> recent = new ArrayDeque<>();
  private int sequence;

  ColdStartTraces(int kept, long epochNanos) {
    this.kept = kept;
    this.epochNanos = epochNanos;
  }

  /**
   * Records one cold start.
   *
   * @param device the device the instance was placed on
   * @param enqueuedNanos when the request arrived at the scheduler
   * @param startNanos when the instance's start began
   * @param start acquire, map and restore-wait in milliseconds, in order
   * @param invokeNanos when the invoke began
   * @param doneNanos when it ended
   */
  synchronized ArrayNode record(String function, int device, long enqueuedNanos, long startNanos, Map<String, Double> start,
      long invokeNanos, long doneNanos) {
    if (kept == 0) {
      return NODES.arrayNode();
    }
    int pid = ++sequence;
    ArrayNode events = NODES.arrayNode();
    events.add(meta(pid, 0, "process_name", function + " cold start #" + pid + " on device " + device));
    events.add(meta(pid, 1, "thread_name", "request"));
    events.add(meta(pid, 2, "thread_name", "instance"));
    events.add(span(pid, 1, "queue", enqueuedNanos, invokeNanos - enqueuedNanos));
    long t = startNanos;
    for (Map.Entry<String, Double> e : start.entrySet()) {
      long dur = Math.round(e.getValue() * 1e6);
      events.add(span(pid, 2, e.getKey(), t, dur));
      t += dur;
    }
    events.add(span(pid, 1, "invoke", invokeNanos, doneNanos - invokeNanos));
    recent.addLast(events);
    while (recent.size() > kept) {
      recent.removeFirst();
    }
    return events;
  }

  /**
   * Adds a restore's own timeline (its copies, launches and waits, from {@code RestoreTrace}) to a cold start
   * {@link #record} returned, on rows of its own below the request's, shifted onto this trace's clock.
   */
  synchronized void attach(ArrayNode coldStart, JsonNode restoreTrace, long originNanos) {
    if (coldStart.isEmpty()) {
      return;
    }
    int pid = coldStart.get(0).get("pid").asInt();
    double shift = (originNanos - epochNanos) / 1e3;
    for (JsonNode e : restoreTrace.path("traceEvents")) {
      ObjectNode copy = ((ObjectNode) e).deepCopy();
      copy.put("pid", pid);
      copy.put("tid", 10 + e.path("tid").asInt());
      if (copy.has("ts")) {
        copy.put("ts", copy.get("ts").asDouble() + shift);
      }
      coldStart.add(copy);
    }
  }

  /** {@code {"traceEvents": [...], "displayTimeUnit": "ms"}}, oldest cold start first. */
  synchronized ObjectNode json() {
    ObjectNode trace = NODES.objectNode();
    ArrayNode all = trace.putArray("traceEvents");
    recent.forEach(all::addAll);
    trace.put("displayTimeUnit", "ms");
    return trace;
  }

  private ObjectNode span(int pid, int tid, String name, long fromNanos, long durNanos) {
    ObjectNode e = NODES.objectNode();
    e.put("name", name);
    e.put("cat", "cold-start");
    e.put("ph", "X");
    e.put("ts", (fromNanos - epochNanos) / 1e3);
    e.put("dur", Math.max(0, durNanos) / 1e3);
    e.put("pid", pid);
    e.put("tid", tid);
    return e;
  }

  private static ObjectNode meta(int pid, int tid, String what, String name) {
    ObjectNode e = NODES.objectNode();
    e.put("name", what);
    e.put("ph", "M");
    e.put("pid", pid);
    e.put("tid", tid);
    e.putObject("args").put("name", name);
    return e;
  }
}
