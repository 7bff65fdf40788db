package dev.thaw.server;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.Images;
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
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The server with one instance per pooled worker process on the sim device: two images at the same addresses
 * served side by side, and a worker killed mid-invoke fails that request cleanly while the next one succeeds.
 */
class PoolInstancesTest {

  @TempDir
  Path dir;

  @Test
  void functionsRunInWorkerProcessesAndALostWorkerFailsOnlyItsRequest() throws Exception {
    Path storePath = dir.resolve("store");
    try (RocksChunkStore store = ServerFixture.openStore(storePath)) {
      ServerFixture.buildMlp(store, "mlp:1");
      ServerFixture.build(store, "gate:1", GateFunction.class.getName(), "{}", null, 0);
    }
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath)
        .setReadOnly(true)); SimDriver driver = SimDriver.open(new SimOptions())) {
      ContextPool pool = ContextPool.create(new ContextPoolOptions().setDevices(List.of(0)).setIdleTarget(1)
          .setMaxWorkers(3).setDeviceChoice("sim").setStorePath(storePath).setWarmupLaunches(0)
          .setJvmOptions(List.of("-XX:+UseSerialGC", "-Xmx256m", "-XX:TieredStopAtLevel=1"))
          .setEnvironment(Map.of("THAW_DEVICE", "sim")));
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
              .addFunction("mlp", new FunctionOptions().setImage("mlp:1"))
              .addFunction("gate", new FunctionOptions().setImage("gate:1")),
          store, new PoolInstances(pool, store, storePath, driver.devices(), Duration.ofSeconds(60),
              Duration.ofSeconds(1)))) {
        int port = server.port();
        HttpResponse<String> cold = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
        assertEquals(200, cold.statusCode(), cold.body());
        assertEquals("cold", cold.headers().firstValue("Thaw-Start").orElseThrow());
        assertEquals(Images.manifest(store, "mlp:1").samples().get(0).response().get("argmax"),
            json(cold).get("argmax"));
        HttpResponse<String> warm = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
        assertEquals("warm", warm.headers().firstValue("Thaw-Start").orElseThrow());
        // In a worker, the function's own time leaves out the pipe both ways, which the invoke phase holds.
        String timing = warm.headers().firstValue("Server-Timing").orElseThrow();
        Matcher t = Pattern.compile("invoke;dur=([0-9.]+), function;dur=([0-9.]+), server;dur=([0-9.]+)")
            .matcher(timing);
        assertTrue(t.find(), timing);
        assertTrue(Double.parseDouble(t.group(2)) < Double.parseDouble(t.group(1))
            && Double.parseDouble(t.group(1)) <= Double.parseDouble(t.group(3)) + 0.002, timing);
        assertEquals(400, postJson(port, "/v1/functions/mlp/invoke", "{\"inputs\": [[1]]}").statusCode());

        // Four clients at once on its one instance: requests queue, and each is sent to the worker by the thread
        // that finished the one before (the pool's reader); every answer is its own and right.
        List<CompletableFuture<List<HttpResponse<String>>>> clients = new ArrayList<>();
        for (int c = 0; c < 4; c++) {
          clients.add(ServerFixture.background(() -> {
            List<HttpResponse<String>> got = new ArrayList<>();
            for (int i = 0; i < 25; i++) {
              got.add(postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST));
            }
            return got;
          }));
        }
        for (CompletableFuture<List<HttpResponse<String>>> c : clients) {
          for (HttpResponse<String> r : c.get(60, TimeUnit.SECONDS)) {
            assertEquals(200, r.statusCode(), r.body());
            assertEquals(json(warm), json(r));
          }
        }

        // gate:1 was built at the MLP's addresses: in its own process it does not care.
        assertEquals(200, postJson(port, "/v1/functions/gate/invoke", "{}").statusCode());
        assertEquals(2, server.instanceCount());

        CompletableFuture<HttpResponse<String>> doomed = ServerFixture.background(
            () -> postJson(port, "/v1/functions/gate/invoke", "{\"sleepMillis\": 20000}"));
        long pid = -1;
        for (int i = 0; i < 1000 && pid < 0; i++) {
          String status = get(port, "/v1/functions/gate").body();
          Matcher m = Pattern.compile("worker pid ([0-9]+)").matcher(status);
          if (status.contains("\"state\":\"busy\"") && m.find()) {
            pid = Long.parseLong(m.group(1));
          }
          Thread.sleep(10);
        }
        assertTrue(pid > 0, "the gate's worker got busy");
        ProcessHandle.of(pid).orElseThrow().destroyForcibly();
        HttpResponse<String> lost = doomed.get(30, TimeUnit.SECONDS);
        assertEquals(502, lost.statusCode(), lost.body());
        assertEquals("instance_lost", json(lost).get("code").asText());
        HttpResponse<String> next = postJson(port, "/v1/functions/gate/invoke", "{}");
        assertEquals(200, next.statusCode(), next.body());
        assertEquals("cold", next.headers().firstValue("Thaw-Start").orElseThrow());
        assertEquals(200, postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode(),
            "the other function never noticed");
      }
      assertTrue(pool.pids().isEmpty(), "every worker gone with the server");
    }
  }
}
