package dev.thaw.bench.coldstart;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/** {@code node-trace.md}: the node trace's tables, from its JSON. */
final class NodeTraceReport {

  private static final List<String> TIERS = List.of("hbm", "host-cache", "store");

  private NodeTraceReport() {}

  static String markdown(JsonNode r) {
    StringBuilder b = new StringBuilder();
    boolean sim = r.path("simulated").asBoolean();
    b.append("# Node trace").append(sim ? " (SIMULATED device: no figure here is a GPU figure)" : "").append("\n\n");
    JsonNode s = r.path("setup");
    JsonNode t = r.path("trace");
    b.append(String.format(Locale.ROOT, "Device: %s. %d functions over %d %s images (%d sharing nothing, %d "
            + "variants sharing their weights; store %.1f MB, built in %.0f s). keepAlive %s, host cache %s, HBM tier "
            + "%s, %d idle workers, %d workers at most.%n%n", r.path("device").asText(),
        s.path("functions").asInt(), s.path("images").asInt() + s.path("variants").asInt(), s.path("model").asText(),
        s.path("images").asInt(), s.path("variants").asInt(), r.path("storeBytes").asLong() / 1e6,
        r.path("buildSeconds").asDouble(), s.path("keepAlive").asText(), s.path("hostCache").asText(),
        s.path("hbmTier").asText(), s.path("idleWorkers").asInt(), s.path("maxWorkers").asInt()));
    b.append(String.format(Locale.ROOT, "Trace: %d requests in %.0f s to %d distinct functions; Zipf %.2f; "
            + "calm %.1f req/s, bursts ×%.0f; calm %.0f s and bursts %.0f s on average; seed %d. Time to first "
            + "response from the client's request to the whole answer, over loopback.%n%n",
        t.path("requests").asInt(), t.path("seconds").asDouble(), t.path("distinctFunctions").asInt(),
        t.path("zipf").asDouble(), t.path("rate").asDouble(), t.path("burstFactor").asDouble(),
        t.path("calmSeconds").asDouble(), t.path("burstSeconds").asDouble(), t.path("seed").asLong()));
    b.append("## Cold starts by tier, one function against many\n\n");
    b.append("| tier | one function registered: p50 (n) | ").append("with every function registered, per policy: p50 (n)")
        .append(" | ratio |\n| --- | --- | --- | --- |\n");
    JsonNode single = r.path("singleFunction").path("coldByTier");
    JsonNode policies = r.path("policies");
    for (String tier : TIERS) {
      JsonNode one = single.path(tier);
      StringBuilder many = new StringBuilder();
      StringBuilder ratio = new StringBuilder();
      for (Iterator<Map.Entry<String, JsonNode>> it = policies.fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> p = it.next();
        JsonNode m = p.getValue().path("probes").path("coldByTier").path(tier);
        if (m.path("n").asInt() == 0) {
          continue;
        }
        many.append(many.length() == 0 ? "" : "; ").append(p.getKey()).append(' ').append(cell(m));
        if (one.path("n").asInt() > 0) {
          ratio.append(ratio.length() == 0 ? "" : "; ").append(p.getKey()).append(' ')
              .append(String.format(Locale.ROOT, "%.2f×", m.path("p50").asDouble() / one.path("p50").asDouble()));
        }
      }
      b.append("| ").append(tier).append(" | ").append(one.path("n").asInt() == 0 ? "—" : cell(one)).append(" | ")
          .append(many.length() == 0 ? "—" : many).append(" | ").append(ratio.length() == 0 ? "—" : ratio)
          .append(" |\n");
    }
    b.append("\n## The trace, per policy\n\n");
    b.append("| policy | requests | errors | cold | cold p50 / p99 (ms) | p99 / p50 | hbm: share, p50 / p99 | "
        + "host cache: share, p50 / p99 | store: share, p50 / p99 | warm p50 / p99 | hit rate HBM / host cache | "
        + "MB moved per request | MB read from the store per request | evictions (keep-alive, memory, lost) | "
        + "held at end: host cache / HBM (MB) |\n");
    b.append("| --- ".repeat(15)).append("|\n");
    for (Iterator<Map.Entry<String, JsonNode>> it = policies.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      JsonNode p = e.getValue();
      if (p.has("failed")) {
        b.append("| ").append(e.getKey()).append(" | failed: ").append(p.path("failed").asText()).append(" |\n");
        continue;
      }
      double[] all = allCold(p);
      b.append("| ").append(e.getKey()).append(" | ").append(p.path("requests").asInt()).append(" | ")
          .append(p.path("errors").asInt()).append(" | ").append(p.path("coldStarts").asInt()).append(" | ");
      if (all.length > 0) {
        double p50 = NodeTrace.median(all);
        double p99 = NodeTrace.percentile(all, 0.99);
        b.append(String.format(Locale.ROOT, "%.1f / %.1f | %.2f", p50, p99, p99 / p50));
      } else {
        b.append("— | —");
      }
      for (String tier : TIERS) {
        JsonNode c = p.path("coldByTier").path(tier);
        b.append(" | ").append(c.path("n").asInt() == 0 ? "—" : String.format(Locale.ROOT, "%.0f%%, %.1f / %.1f",
            100 * c.path("shareOfCold").asDouble(), c.path("p50").asDouble(), c.path("p99").asDouble()));
      }
      JsonNode w = p.path("warm");
      b.append(" | ").append(w.path("n").asInt() == 0 ? "—" : String.format(Locale.ROOT, "%.2f / %.2f",
          w.path("p50").asDouble(), w.path("p99").asDouble()));
      b.append(String.format(Locale.ROOT, " | %.0f%% / %.0f%% | %.3f | %.3f | %.0f, %.0f, %.0f | %.1f / %.1f |%n",
          100 * p.path("hbmHitRate").asDouble(), 100 * p.path("hostCacheHitRate").asDouble(),
          p.path("bytesMovedPerRequest").asDouble() / 1e6, p.path("storeBytesReadPerRequest").asDouble() / 1e6,
          p.path("evictions").path("keep_alive").asDouble(), p.path("evictions").path("memory").asDouble(),
          p.path("evictions").path("lost").asDouble(), p.path("heldAtEnd").path("hostCacheBytes").asDouble() / 1e6,
          p.path("heldAtEnd").path("hbmTierBytes").asDouble() / 1e6));
    }
    b.append("\nPolicies: `recency` (the default: a registration stages only into free host-cache room, cold starts "
        + "decide what stays), `registration` (the policy-free baseline: every registration stages, evicting the least "
        + "recently used), `off` (no host cache, no HBM tier: every cold start from the store), `no-recycle` "
        + "(recency, with every worker one image in its life: a cold start of another function takes a fresh worker; "
        + "the others recycle a worker that scaled to zero).\n");
    for (Iterator<Map.Entry<String, JsonNode>> it = policies.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      JsonNode p = e.getValue();
      b.append(String.format(Locale.ROOT, "%n%s: %d functions registered in %.0f ms; GET /v1/functions %.1f ms; "
              + "/metrics %d series; %.0f workers recycled during the trace.", e.getKey(),
          r.path("setup").path("functions").asInt(), p.path("registerMillis").asDouble(),
          p.path("listMillis").asDouble(), p.path("metricsLines").asInt(), p.path("recycles").asDouble()));
      for (JsonNode err : p.path("errorSamples")) {
        b.append("\n- error: ").append(err.asText());
      }
    }
    return b.append('\n').toString();
  }

  private static String cell(JsonNode stats) {
    return String.format(Locale.ROOT, "%.1f ms (%d)", stats.path("p50").asDouble(), stats.path("n").asInt());
  }

  private static double[] allCold(JsonNode policy) {
    return TIERS.stream().flatMap(tier -> {
      List<Double> out = new ArrayList<>();
      policy.path("coldByTier").path(tier).path("samples").forEach(v -> out.add(v.asDouble()));
      return out.stream();
    }).mapToDouble(Double::doubleValue).sorted().toArray();
  }
}
