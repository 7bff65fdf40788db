package dev.thaw.server.impl;

import dev.thaw.runtime.function.FunctionResponse;
import java.util.Map;

/**
 * A served request: the response, whether it waited for a cold start, and where its time went.
 *
 * @param function the function's name
 * @param response the function's response
 * @param cold true when this request was the first an instance served after its start (it waited for it)
 * @param phases milliseconds per phase, in order: queue, acquire, map, restore-wait, invoke
 * @param instance the instance that served it, described
 * @param tier for a cold request, the way its instance's image bytes came in ({@code hbm}: this device's HBM tier;
 *     {@code hbm-peer}: another device's, over the peer link; {@code host-cache-multilink}: the host cache through
 *     this device's link and idle devices' links; {@code host-cache}; {@code store}); null for a warm one
 * @param functionMillis the function's own invoke where it ran, a part of {@code invoke} (which, for a worker,
 *     also holds the pipe both ways and the request's decoding there)
 */
public record Invocation(String function, FunctionResponse response, boolean cold, Map<String, Double> phases,
    String instance, String tier, double functionMillis) {

  /**
   * The {@code Server-Timing} header's value: the phases, then {@code function} (the function's own invoke) and
   * {@code server} (from the request's arrival to its response, inside the server: {@code serverMillis}), e.g.
   * {@code queue;dur=0.012, invoke;dur=1.300, function;dur=1.210, server;dur=1.380}; a cold request's ends with the
   * tier its image came from, as a metric with a description only: {@code tier;desc="host-cache"}.
   */
  public String serverTiming(double serverMillis) {
    StringBuilder s = new StringBuilder(160);
    for (Map.Entry<String, Double> e : phases.entrySet()) {
      metric(s, e.getKey(), e.getValue());
    }
    metric(s, "function", functionMillis);
    metric(s, "server", serverMillis);
    if (tier != null) {
      s.append(", tier;desc=\"").append(tier).append('"');
    }
    return s.toString();
  }

  private static void metric(StringBuilder s, String name, double millis) {
    if (s.length() > 0) {
      s.append(", ");
    }
    appendMillis(s.append(name).append(";dur="), millis);
  }

  /** {@code millis} with three decimals, as {@code %.3f} writes it, without a formatter on the event loop. */
  static StringBuilder appendMillis(StringBuilder s, double millis) {
    long micros = Math.round(millis * 1000);
    if (micros < 0) {
      s.append('-');
      micros = -micros;
    }
    long frac = micros % 1000;
    s.append(micros / 1000).append('.');
    if (frac < 100) {
      s.append(frac < 10 ? "00" : "0");
    }
    return s.append(frac);
  }
}
