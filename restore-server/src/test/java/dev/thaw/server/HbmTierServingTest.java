package dev.thaw.server;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.Images;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.PoolInstances;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.function.Predicate;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The HBM tier behind the server, on the sim device with real worker processes, the real store and a real server
 * on loopback: an instance scaled in after its keep-alive hands its read-only slabs (exported descriptors) to the
 * tier before its worker exits; the next cold start of that image maps them read-only in a new worker process
 * ({@code tier;desc="hbm"}) and answers exactly as the image's sample did.
 */
class HbmTierServingTest {

  /** 512 x 2048 x 256 floats: 6 MiB of weights, several 2 MiB pages no written buffer touches. */
  private static final String MLP = "{\"layers\": [512, 2048, 256], \"seed\": 11, \"maxBatch\": 1}";

  @TempDir
  Path dir;

  @Test
  void aScaledInInstanceLeavesItsWeightsOnTheDeviceForTheNextColdStart() throws Exception {
    Path storePath = dir.resolve("store");
    StringBuilder request = new StringBuilder("{\"inputs\": [[");
    for (int i = 0; i < 512; i++) {
      request.append(i == 0 ? "" : ", ").append(i % 5 - 2);
    }
    String sample = request.append("]]}").toString();
    try (RocksChunkStore store = ServerFixture.openStore(storePath)) {
      ServerFixture.build(store, "wide:1", ServerFixture.MLP, MLP, sample, 0);
    }
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      JsonNode expected = Images.manifest(store, "wide:1").samples().get(0).response().get("argmax");
      HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(32 << 20));
      ContextPool pool = ContextPool.create(new ContextPoolOptions().setDevices(List.of(0)).setIdleTarget(1)
          .setMaxWorkers(3).setDeviceChoice("sim").setStorePath(storePath).setWarmupLaunches(0)
          .setHostCachePath(cache.path())
          .setJvmOptions(List.of("-XX:+UseSerialGC", "-Xmx256m", "-XX:TieredStopAtLevel=1"))
          .setEnvironment(Map.of("THAW_DEVICE", "sim")));
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
              .addFunction("wide", new FunctionOptions().setImage("wide:1").setKeepAlive(Duration.ofMillis(200))),
          store, new PoolInstances(pool, cache, 64L << 20, store, storePath, driver.devices(), Duration.ofSeconds(60),
              Duration.ofSeconds(1)))) {
        int port = server.port();
        await(port, s -> s.path("image").path("hostCache").asText().equals("cached"));
        awaitReady(port);
        HttpResponse<String> first = postJson(port, "/v1/functions/wide/invoke", sample);
        assertEquals(200, first.statusCode(), first.body());
        assertTrue(first.headers().firstValue("Server-Timing").orElseThrow().contains("tier;desc=\"host-cache\""));
        assertEquals(expected, json(first).get("argmax"));

        // Scaled in after its keep-alive: the worker is gone, its weights are not.
        JsonNode held = await(port, s -> s.path("state").asText().equals("cold")
            && s.path("image").path("hbmBytes").path("0").asLong() > 0);
        assertTrue(held.path("image").path("hbmBytes").path("0").asLong() >= 2 << 20, held.toString());
        awaitReady(port);
        HttpResponse<String> again = postJson(port, "/v1/functions/wide/invoke", sample);
        assertEquals(200, again.statusCode(), again.body());
        assertEquals("cold", again.headers().firstValue("Thaw-Start").orElseThrow());
        String timing = again.headers().firstValue("Server-Timing").orElseThrow();
        assertTrue(timing.contains("tier;desc=\"hbm\""), timing);
        assertEquals(expected, json(again).get("argmax"), "the weights mapped from the tier are the image's");
        assertEquals(json(first).get("outputs"), json(again).get("outputs"));
        String metrics = get(port, "/metrics").body();
        assertTrue(metrics.lines().anyMatch(l -> l.startsWith("thaw_restore_bytes_total{") && l.contains("tier=\"hbm\"")),
            metrics);
      }
      assertTrue(pool.pids().isEmpty(), "every worker gone with the server");
    }
  }

  private static JsonNode await(int port, Predicate<JsonNode> done) throws Exception {
    JsonNode s = null;
    for (int i = 0; i < 3000; i++) {
      s = json(get(port, "/v1/functions/wide"));
      if (done.test(s)) {
        return s;
      }
      Thread.sleep(10);
    }
    throw new AssertionError("the function never reached the expected state: " + s);
  }

  private static void awaitReady(int port) throws Exception {
    for (int i = 0; i < 6000; i++) {
      if (get(port, "/v2/health/ready").statusCode() == 200) {
        return;
      }
      Thread.sleep(10);
    }
    throw new AssertionError("the server never became ready");
  }
}
