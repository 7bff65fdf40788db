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
 * @param tier for a cold request, where its instance's image bytes came from ({@code hbm}, {@code host-cache},
 *     {@code store}); null for a warm one
 */
public record Invocation(String function, FunctionResponse response, boolean cold, Map<String, Double> phases,
    String instance, String tier) {

  /**
   * The {@code Server-Timing} header's value: {@code queue;dur=0.012, invoke;dur=1.3}; a cold request's ends with
   * the tier its image came from, as a metric with a description only: {@code tier;desc="host-cache"}.
   */
  public String serverTiming() {
    String timing = phases.entrySet().stream()
        .map(e -> String.format(Locale.ROOT, "%s;dur=%.3f", e.getKey(), e.getValue()))
        .collect(Collectors.joining(", "));
    return tier == null ? timing : timing + ", tier;desc=\"" + tier + "\"";
  }

  public double totalMillis() {
    return phases.values().stream().mapToDouble(Double::doubleValue).sum();
  }
}
