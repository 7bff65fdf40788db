package dev.thaw.server;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.examples.probe.MemoryProbeFunction;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.PoolInstances;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The fault trial on the sim device, through the real pool-backed server: while a client keeps the MLP busy, the
 * memory probe is sent an offset that makes its kernel read an unmapped address, a sticky
 * {@code CUDA_ERROR_ILLEGAL_ADDRESS} that poisons its worker process. That request gets a 502 naming the fault, the
 * probe's worker is gone and its next request is served by a fresh one, and the MLP never notices: every one of its
 * requests is a 200 with the right outputs, served warm by the one worker it started on.
 */
class FaultIsolationTest {

  static final String PROBE_CONFIG = "{\"elements\": 4096, \"maxCount\": 16}";
  static final String PROBE_GOOD = "{\"offset\": 100, \"count\": 4}";
  static final String PROBE_FAULT = "{\"offset\": " + MemoryProbeFunction.FAULT_OFFSET + ", \"count\": 1}";
  static final Pattern PID = Pattern.compile("worker pid ([0-9]+)");
  static final Duration WAIT = Duration.ofSeconds(60);

  @TempDir
  Path dir;

  /** One MLP response as the load client saw it. */
  record Seen(int status, String start, String body) {}

  @Test
  void aKernelFaultInOneFunctionFailsOnlyItsRequestAndTheOtherFunctionNeverNotices() throws Exception {
    Path storePath = dir.resolve("store");
    try (RocksChunkStore store = ServerFixture.openStore(storePath)) {
      ServerFixture.buildMlp(store, "mlp:1");
      ServerFixture.build(store, "probe:1", MemoryProbeFunction.class.getName(), PROBE_CONFIG, PROBE_GOOD, 0);
    }
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions()); CapturedStderr log = new CapturedStderr()) {
      ContextPool pool = ContextPool.create(new ContextPoolOptions().setDevices(List.of(0)).setIdleTarget(1)
          .setMaxWorkers(4).setDeviceChoice("sim").setStorePath(storePath).setWarmupLaunches(0)
          .setJvmOptions(List.of("-XX:+UseSerialGC", "-Xmx256m", "-XX:TieredStopAtLevel=1"))
          .setEnvironment(Map.of("THAW_DEVICE", "sim")));
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
              .addFunction("mlp", new FunctionOptions().setImage("mlp:1"))
              .addFunction("probe", new FunctionOptions().setImage("probe:1")),
          store, new PoolInstances(pool, store, storePath, driver.devices(), WAIT, Duration.ofSeconds(1)))) {
        int port = server.port();
        HttpResponse<String> mlpCold = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
        assertEquals(200, mlpCold.statusCode(), mlpCold.body());
        String expected = mlpCold.body();
        assertProbeServes(postJson(port, "/v1/functions/probe/invoke", PROBE_GOOD));
        long mlpPid = pid(port, "mlp");
        long probePid = pid(port, "probe");
        assertNotEquals(mlpPid, probePid);

        ConcurrentLinkedQueue<Seen> seen = new ConcurrentLinkedQueue<>();
        AtomicInteger sent = new AtomicInteger();
        AtomicBoolean stop = new AtomicBoolean();
        CompletableFuture<Void> load = ServerFixture.background(() -> {
          while (!stop.get()) {
            sent.incrementAndGet();
            HttpResponse<String> r = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
            seen.add(new Seen(r.statusCode(), r.headers().firstValue("Thaw-Start").orElse("?"), r.body()));
          }
          return null;
        });
        await(() -> seen.size() >= 10, "the MLP load got going");

        HttpResponse<String> fault = postJson(port, "/v1/functions/probe/invoke", PROBE_FAULT);
        int beforeFault = seen.size();
        assertEquals(502, fault.statusCode(), fault.body());
        JsonNode error = json(fault);
        assertEquals("device_fault", error.get("code").asText(), fault.body());
        assertTrue(error.get("error").asText().contains("CUDA_ERROR_ILLEGAL_ADDRESS"), fault.body());
        assertTrue(log.errorLogged(error.get("requestId").asText()).contains("probe_read"),
            "the server's log names the kernel under the request's id: " + log.text());
        await(() -> ProcessHandle.of(probePid).map(p -> !p.isAlive()).orElse(true), "the faulted worker exited");
        assertEquals(200, get(port, "/v2/health/live").statusCode(), "a worker's fault leaves the server live");

        HttpResponse<String> recovered = postJson(port, "/v1/functions/probe/invoke", PROBE_GOOD);
        assertProbeServes(recovered);
        assertEquals("cold", recovered.headers().firstValue("Thaw-Start").orElseThrow(), "a fresh worker");
        assertNotEquals(probePid, pid(port, "probe"));
        int atRecovery = seen.size();
        await(() -> seen.size() >= atRecovery + 10, "the MLP load went on after the probe recovered");
        stop.set(true);
        load.get(WAIT.toSeconds(), TimeUnit.SECONDS);

        System.out.printf("MLP under load: %d requests (%d before the fault's 502, %d by the probe's recovery), "
            + "probe worker %d faulted and was replaced (sim device): %s%n", seen.size(), beforeFault, atRecovery,
            probePid, fault.body());
        assertEquals(sent.get(), seen.size(), "every MLP request answered");
        for (Seen s : seen) {
          assertEquals(200, s.status(), s.body());
          assertEquals("warm", s.start(), "the MLP's instance was never restarted");
          assertEquals(tree(expected), tree(s.body()), "the MLP's outputs");
        }
        assertEquals(mlpPid, pid(port, "mlp"), "the MLP's worker is the one it started on");
        JsonNode instance = json(get(port, "/v1/functions/mlp")).get("instances").get(0);
        assertEquals(seen.size() + 1, instance.get("served").asInt(), "one instance served every MLP request");
        assertTrue(ProcessHandle.of(mlpPid).orElseThrow().isAlive());
      }
      assertTrue(pool.pids().isEmpty(), "every worker gone with the server");
    }
  }

  private static JsonNode tree(String body) throws Exception {
    return ServerFixture.JSON.readTree(body);
  }

  private static void assertProbeServes(HttpResponse<String> r) throws Exception {
    assertEquals(200, r.statusCode(), r.body());
    JsonNode values = json(r).get("values");
    assertEquals(4, values.size(), r.body());
    for (int j = 0; j < 4; j++) {
      assertEquals(100 + j, values.get(j).floatValue(), r.body());
    }
  }

  /** The pid of the worker that runs the function's one instance. */
  private static long pid(int port, String function) throws Exception {
    String status = get(port, "/v1/functions/" + function).body();
    Matcher m = PID.matcher(status);
    assertTrue(m.find(), status);
    return Long.parseLong(m.group(1));
  }

  private static void await(BooleanSupplier condition, String what) throws InterruptedException {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (!condition.getAsBoolean()) {
      assertTrue(System.nanoTime() < deadline, "timed out waiting: " + what);
      Thread.sleep(10);
    }
  }
}
