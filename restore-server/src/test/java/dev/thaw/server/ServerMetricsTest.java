package dev.thaw.server;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.postJson;
import static dev.thaw.server.ServerFixture.request;
import static dev.thaw.server.ServerFixture.send;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import dev.thaw.server.impl.ServerMetrics;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code /metrics} of a real server on loopback (sim device, the real store): every family has its help, every
 * documented metric is there at zero from the start, Prometheus's own checker accepts the exposition, and its size
 * stays bounded as functions are added: histograms carry no function label, and a function adds a fixed set of
 * series, removed with it.
 */
class ServerMetricsTest {

  private static final String TOKEN = "m".repeat(32);
  /** What docs/design/server.md lists, each present from the start. */
  private static final List<String> DOCUMENTED = List.of("thaw_invocations_total", "thaw_invocation_seconds_total",
      "thaw_phase_seconds", "thaw_phase_seconds_max", "thaw_instances", "thaw_queue_depth", "thaw_rejected_total",
      "thaw_restore_bytes_total", "thaw_start_failures_total", "thaw_evictions_total", "thaw_wake_ahead_total",
      "thaw_close_failures_total", "thaw_gpu_memory_budget_bytes", "thaw_gpu_memory_reserved_bytes",
      "thaw_http_responses_total", "thaw_http_abandoned_total", "jvm_memory_used_bytes", "jvm_threads_live_threads",
      "jvm_gc_memory_allocated_bytes_total", "jvm_classes_loaded_classes", "jvm_info", "process_cpu_usage",
      "process_cpu_seconds_total", "process_uptime_seconds", "process_files_open_files", "system_cpus");

  @TempDir
  static Path dir;

  static RocksChunkStore store;
  static SimDriver driver;
  ThawServer server;

  @BeforeAll
  static void images() throws Exception {
    store = ServerFixture.openStore(dir.resolve("store"));
    ServerFixture.buildMlp(store, "mlp:1");
    driver = SimDriver.open(new SimOptions());
  }

  @AfterAll
  static void close() {
    driver.close();
    store.close();
  }

  @AfterEach
  void stop() {
    if (server != null) {
      server.close();
      assertEquals(0, server.instanceCount());
    }
  }

  private int start() {
    server = ThawServer.start(new ServerOptions().setPort(0).setAdminToken(TOKEN)
        .addFunction("mlp", new FunctionOptions().setImage("mlp:1")), store, new InProcessInstances(driver, store));
    return server.port();
  }

  @Test
  void everyFamilyHasHelpAndEveryDocumentedMetricIsThereAtZeroFromTheStart() throws Exception {
    int port = start();
    String text = get(port, "/metrics").body();
    Set<String> typed = new TreeSet<>();
    Map<String, String> help = new HashMap<>();
    for (String line : text.lines().toList()) {
      String[] f = line.split(" ", 4);
      if (line.startsWith("# TYPE ")) {
        typed.add(f[2]);
      } else if (line.startsWith("# HELP ")) {
        help.put(f[2], f.length > 3 ? f[3].strip() : "");
      }
    }
    for (String family : typed) {
      assertTrue(!help.getOrDefault(family, "").isEmpty(), "HELP text for " + family);
    }
    for (String family : DOCUMENTED) {
      assertTrue(typed.contains(family), family + " in /metrics before any request");
    }
    for (String series : List.of("thaw_invocations_total{function=\"mlp\",outcome=\"ok\",start=\"cold\"} 0.0",
        "thaw_start_failures_total{function=\"mlp\"} 0.0",
        "thaw_evictions_total{function=\"mlp\",reason=\"keep_alive\"} 0.0",
        "thaw_restore_bytes_total{function=\"mlp\",tier=\"host-cache\"} 0.0",
        "thaw_phase_seconds_count{phase=\"restore-wait\",start=\"cold\"} 0",
        "thaw_http_responses_total{code=\"503\"} 0.0")) {
      assertTrue(text.contains(series + "\n"), series + " in:\n" + text);
    }
  }

  @Test
  void promtoolAcceptsTheExpositionAfterColdWarmAndRefusedRequests() throws Exception {
    String promtool = TestTools.require("promtool");
    int port = start();
    assertEquals(200, postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
    assertEquals(200, postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
    assertEquals(400, postJson(port, "/v1/functions/mlp/invoke", "{\"inputs\": 3}").statusCode());
    assertEquals(404, get(port, "/v1/functions/nope").statusCode());
    assertEquals(404, get(port, "/v2/models/mlp/versions/x").statusCode());
    String text = get(port, "/metrics").body();
    assertTrue(text.contains("thaw_invocations_total{function=\"mlp\",outcome=\"ok\",start=\"warm\"} 1.0"), text);
    assertTrue(text.contains("thaw_http_responses_total{code=\"404\"} 2.0"), text);

    Path file = dir.resolve("metrics.txt");
    Files.writeString(file, text);
    Process p = new ProcessBuilder(promtool, "check", "metrics").redirectInput(file.toFile()).redirectErrorStream(true)
        .start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(p.waitFor(60, TimeUnit.SECONDS), "promtool finished");
    assertEquals(0, p.exitValue(), "promtool check metrics:\n" + out);
  }

  @Test
  void histogramsStayTheSameSizeAndEachFunctionAddsAFixedSetOfSeriesRemovedWithIt() throws Exception {
    int port = start();
    HttpResponse<String> first = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
    assertEquals(200, first.statusCode(), first.body());
    String one = get(port, "/metrics").body();
    for (int i = 1; i < 100; i++) {
      HttpResponse<String> put = send(request(port, "/v1/functions/f" + i).header("Authorization", "Bearer " + TOKEN)
          .header("Content-Type", "application/json").PUT(HttpRequest.BodyPublishers.ofString("{\"image\": \"mlp:1\"}"))
          .build());
      assertEquals(201, put.statusCode(), put.body());
    }
    // Cold starts of functions whose images share addresses: each evicts the one before (reason "memory").
    for (int i = 1; i <= 5; i++) {
      HttpResponse<String> r = postJson(port, "/v1/functions/f" + i + "/invoke", ServerFixture.MLP_REQUEST);
      assertEquals(200, r.statusCode(), r.body());
    }
    String hundred = get(port, "/metrics").body();

    assertEquals(histogramLines(one), histogramLines(hundred), "histogram lines do not grow with functions");
    assertTrue(histogramLines(one) < 200, "7 phase histograms of fixed buckets: " + histogramLines(one));
    assertEquals(ServerMetrics.SERIES_PER_FUNCTION, functionLines(one), "one function's series");
    assertEquals(100 * ServerMetrics.SERIES_PER_FUNCTION, functionLines(hundred), "a fixed set per function");
    long others = lines(hundred) - functionLines(hundred);
    assertTrue(others - (lines(one) - functionLines(one)) < 50,
        "the lines without a function label stay put (new GC or status series aside): " + lines(one) + " -> "
            + lines(hundred));
    assertTrue(hundred.contains("thaw_evictions_total{function=\"f1\",reason=\"memory\"} 1.0"), hundred);

    for (int i = 1; i < 50; i++) {
      HttpResponse<String> del = send(request(port, "/v1/functions/f" + i).header("Authorization", "Bearer " + TOKEN)
          .DELETE().build());
      assertEquals(200, del.statusCode(), del.body());
    }
    assertEquals(51 * ServerMetrics.SERIES_PER_FUNCTION, functionLines(get(port, "/metrics").body()),
        "a deleted function's series go with it");
  }

  @Test
  void aReplacedFunctionKeepsCountingInTheSameSeriesAndItsGaugesFollowTheNewInstances() throws Exception {
    int port = start();
    assertEquals(200, postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
    HttpResponse<String> put = send(request(port, "/v1/functions/mlp").header("Authorization", "Bearer " + TOKEN)
        .header("Content-Type", "application/json").PUT(HttpRequest.BodyPublishers.ofString("{\"image\": \"mlp:1\"}"))
        .build());
    assertEquals(200, put.statusCode(), put.body());
    ServerFixture.awaitState(port, "mlp", s -> s.path("instances").isEmpty());
    assertEquals(200, postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
    String text = get(port, "/metrics").body();
    assertTrue(text.contains("thaw_invocations_total{function=\"mlp\",outcome=\"ok\",start=\"cold\"} 2.0"), text);
    assertTrue(text.contains("thaw_instances{function=\"mlp\",state=\"idle\"} 1.0"), text);
  }

  private static long lines(String text) {
    return text.lines().filter(l -> !l.startsWith("#")).count();
  }

  private static long histogramLines(String text) {
    return text.lines().filter(l -> l.startsWith("thaw_phase_seconds")).count();
  }

  private static long functionLines(String text) {
    return text.lines().filter(l -> l.startsWith("thaw_") && l.contains("function=\"")).count();
  }
}
