package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.node.ArrayNode;
import dev.thaw.server.spi.StartPhases;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * What a request's phases took (queue; for a cold one the start it waited for: acquire, map, restore-wait; invoke),
 * counted in the scheduler's meters, and a cold start's timeline kept in its function's traces.
 *
 * <p>Thread-safe, unlike the scheduler's other parts: it reads only what a deployment and a started instance hold
 * fixed, and writes only meters and traces, which are; so a request is recorded on the thread that finished it,
 * outside the {@link Scheduler}'s monitor.
 */
final class RequestPhases {

  private final ServerMetrics metrics;

  RequestPhases(ServerMetrics metrics) {
    this.metrics = metrics;
  }

  /**
   * A request's phases in milliseconds, in order: {@code queue}, for a cold one its start's, {@code invoke}.
   *
   * @param start the phases of the start of the instance that served it
   */
  static Map<String, Double> of(long enqueued, boolean cold, StartPhases start, long invokeStart, long done) {
    Map<String, Double> phases = new LinkedHashMap<>();
    double waited = (invokeStart - enqueued) / 1e6;
    if (cold) {
      // The request waited for the start it triggered (or a part of it); the rest of the wait was queueing.
      double startedWithin = Math.min(start.totalMillis(), waited);
      phases.put("queue", waited - startedWithin);
      phases.put("acquire", start.acquireMillis());
      phases.put("map", start.mapMillis());
      phases.put("restore-wait", start.restoreMillis());
    } else {
      phases.put("queue", waited);
    }
    phases.put("invoke", (done - invokeStart) / 1e6);
    return phases;
  }

  /** An instance started: its start's phases and the bytes it restored, by the tier they came from. */
  void started(Deployment d, StartPhases p) {
    metrics.recordPhase("acquire", "cold", p.acquireMillis());
    metrics.recordPhase("map", "cold", p.mapMillis());
    metrics.recordPhase("restore-wait", "cold", p.restoreMillis());
    d.meters.restored(p.tier(), p.restoredBytes());
  }

  /**
   * A request {@code slot} served ended: its queue and invoke phases, its outcome and its time in the scheduler; a cold
   * one's timeline goes to its function's traces, with the restore's own once the instance has it.
   *
   * @param phases as {@link #of} made them
   */
  void invoked(InstanceSlot slot, long enqueued, boolean cold, Map<String, Double> phases, boolean ok,
      long invokeStart, long done) {
    String start = cold ? "cold" : "warm";
    metrics.recordPhase("queue", start, phases.get("queue"));
    metrics.recordPhase("invoke", start, phases.get("invoke"));
    Deployment d = slot.deployment;
    d.meters.invoked(cold, ok, (done - enqueued) / 1e6);
    if (!cold) {
      return;
    }
    Map<String, Double> startPhases = new LinkedHashMap<>(phases);
    startPhases.remove("queue");
    startPhases.remove("invoke");
    ColdStartTraces traces = d.traces;
    ArrayNode coldStart = traces.record(d.name, slot.device, enqueued, Math.max(slot.startNanos, enqueued),
        startPhases, invokeStart, done);
    slot.instance.restoreTimeline().thenAccept(t -> {
      if (t != null) {
        traces.attach(coldStart, t.chromeTrace(), t.originNanos());
      }
    });
  }
}
