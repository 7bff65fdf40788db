package dev.thaw.server;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A server runs its own part of a cold start once ahead, after its HTTP warm-up: a cold and a warm request through a
 * throwaway scheduler whose stand-in instance answers at once. It leaves the real server as it was: no instance, no
 * cold start in any trace, no warm-up function or its counts in the metrics; the phase histograms are there from
 * the start, at zero. The first real cold request then reports its phases as every cold request does: its
 * queue is its wait less the start it waited for, the trace's request row minus its instance row. On the sim device
 * with real instances in process, the real store and a real server on loopback.
 */
class ColdPathWarmupTest {

  private static final Pattern TIMING = Pattern.compile("([a-z-]+);dur=([0-9.]+)");

  @TempDir
  Path dir;

  @Test
  void theColdPathIsWarmedThroughAThrowawaySchedulerAndTheFirstColdRequestReportsItsPhases() throws Exception {
    try (RocksChunkStore store = ServerFixture.openStore(dir.resolve("store"));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      ServerFixture.buildMlp(store, "mlp:1");
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
              .addFunction("mlp", new FunctionOptions().setImage("mlp:1")),
          store, new InProcessInstances(driver, store))) {
        int port = server.port();
        assertEquals("200 404", server.httpWarmup().get(30, TimeUnit.SECONDS));
        assertEquals("cold warm", server.coldPathWarmup().get(30, TimeUnit.SECONDS),
            "a cold request, then a warm one, through the throwaway scheduler");

        assertEquals(0, server.instanceCount(), "the warm-up started no instance of the server's own");
        assertEquals(0, json(get(port, "/v1/functions/mlp/trace")).path("traceEvents").size(), "nor a cold start");
        JsonNode functions = json(get(port, "/v1/functions")).path("functions");
        assertEquals(1, functions.size(), functions.toString());
        assertEquals("mlp", functions.get(0).path("name").asText());
        String metrics = get(port, "/metrics").body();
        assertFalse(metrics.contains("function=\"warmup\""), "the warm-up's metrics are its own: " + metrics);
        for (String timer : List.of("queue\",start=\"cold", "map\",start=\"cold", "invoke\",start=\"warm")) {
          assertEquals(0.0, phaseCount(metrics, timer), "registered with the server, at zero: " + timer);
        }

        HttpResponse<String> cold = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
        assertEquals(200, cold.statusCode(), cold.body());
        assertEquals("cold", cold.headers().firstValue("Thaw-Start").orElseThrow());
        Map<String, Double> timing = timing(cold.headers().firstValue("Server-Timing").orElseThrow());
        assertEquals(List.of("queue", "acquire", "map", "restore-wait", "invoke", "function", "server"),
            List.copyOf(timing.keySet()));
        double phases = 0;
        for (String p : List.of("queue", "acquire", "map", "restore-wait", "invoke")) {
          phases += timing.get(p);
        }
        assertTrue(phases <= timing.get("server") + 0.005, "the phases lie inside the request's time: " + timing);

        ColdStartTrace t = ColdStartTrace.read(port, "mlp").get(0);
        double start = 0;
        for (String p : List.of("acquire", "map", "restore-wait")) {
          double us = t.span(2, p).get("dur").asDouble();
          assertEquals(timing.get(p), us / 1e3, 0.002, p + " as the trace's instance row has it");
          start += us / 1e3;
        }
        double waited = t.span(1, "queue").get("dur").asDouble() / 1e3;
        assertEquals(waited - start, timing.get("queue"), 0.005,
            "queue: the wait (the trace's request row) less the start it waited for (its instance row)");
        assertEquals(1.0, phaseCount(get(port, "/metrics").body(), "queue\",start=\"cold"));
      }
    }
  }

  private static Map<String, Double> timing(String header) {
    Map<String, Double> m = new LinkedHashMap<>();
    Matcher x = TIMING.matcher(header);
    while (x.find()) {
      m.put(x.group(1), Double.parseDouble(x.group(2)));
    }
    return m;
  }

  /** {@code thaw_phase_seconds_count} for {@code phaseAndStart} ({@code queue",start="cold}). */
  private static double phaseCount(String metrics, String phaseAndStart) {
    return metrics.lines().filter(l -> l.startsWith("thaw_phase_seconds_count{")
            && l.contains("phase=\"" + phaseAndStart + "\""))
        .mapToDouble(l -> Double.parseDouble(l.substring(l.lastIndexOf(' ') + 1)))
        .reduce(Double.NaN, (a, b) -> Double.isNaN(a) ? b : a + b);
  }
}
