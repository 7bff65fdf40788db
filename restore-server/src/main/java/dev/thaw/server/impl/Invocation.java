package dev.thaw.server.impl;

import dev.thaw.runtime.function.FunctionResponse;
import java.util.Locale;
import java.util.Map;
import java.util.stream.Collectors;

/**
 * A served request: the response, whether it waited for a cold start, and where its time went.
 *
 * @param function the function's name
 * @param response the function's response
 * @param cold true when this request was the first an instance served after its start (it waited for it)
 * @param phases milliseconds per phase, in order: queue, acquire, map, restore-wait, invoke
 * @param instance the instance that served it, described
 */
public record Invocation(String function, FunctionResponse response, boolean cold, Map<String, Double> phases,
    String instance) {

  /** The {@code Server-Timing} header's value: {@code queue;dur=0.012, invoke;dur=1.3}. */
  public String serverTiming() {
    return phases.entrySet().stream()
        .map(e -> String.format(Locale.ROOT, "%s;dur=%.3f", e.getKey(), e.getValue()))
        .collect(Collectors.joining(", "));
  }

  public double totalMillis() {
    return phases.values().stream().mapToDouble(Double::doubleValue).sum();
  }
}
