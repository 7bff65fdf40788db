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
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.function.Predicate;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pool-backed instances restoring from the server's host image cache, on the sim device with real worker processes,
 * the real store and a real server on loopback: a function's image is staged when it is registered (at start and by
 * PUT), its first cold invoke is served from the cache (Server-Timing's tier, the per-tier restore bytes), the
 * lease is given back once the worker has the whole image; an image the cache cannot hold is read from the store,
 * and its state says why.
 */
class HostCacheServingTest {

  private static final String TOKEN = "host-cache-test-token";
  /** Layers of 256 x 512 x 256 floats: 1 MiB of weights, more than the cache below holds. */
  private static final String BIG_MLP = "{\"layers\": [256, 512, 256], \"seed\": 5, \"maxBatch\": 2}";

  @TempDir
  Path dir;

  @Test
  void registeredImagesAreStagedAndColdStartsRestoreFromTheHostCache() throws Exception {
    Path storePath = dir.resolve("store");
    try (RocksChunkStore store = ServerFixture.openStore(storePath)) {
      ServerFixture.buildMlp(store, "mlp:1");
      ServerFixture.build(store, "big:1", ServerFixture.MLP, BIG_MLP, null, 0);
    }
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(256 << 10));
      ContextPool pool = ContextPool.create(new ContextPoolOptions().setDevices(List.of(0)).setIdleTarget(1)
          .setMaxWorkers(3).setDeviceChoice("sim").setStorePath(storePath).setWarmupLaunches(0)
          .setHostCachePath(cache.path())
          .setJvmOptions(List.of("-XX:+UseSerialGC", "-Xmx256m", "-XX:TieredStopAtLevel=1"))
          .setEnvironment(Map.of("THAW_DEVICE", "sim")));
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0).setAdminToken(TOKEN)
              .addFunction("mlp", new FunctionOptions().setImage("mlp:1")),
          store, new PoolInstances(pool, cache, store, storePath, driver.devices(), Duration.ofSeconds(60),
              Duration.ofSeconds(1)))) {
        int port = server.port();
        JsonNode staged = await(port, "mlp", s -> s.path("image").path("hostCache").asText().equals("cached"));
        assertTrue(staged.path("image").path("stagedBytes").asLong() > 0, staged.toString());
        assertTrue(cache.stats().usedBytes() > 0, "the image is in the arena: " + cache.stats());
        assertEquals(0, cache.stats().pinnedBytes(), "a staged image is not pinned until a worker reads it");
        awaitReady(port);

        HttpResponse<String> cold = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
        assertEquals(200, cold.statusCode(), cold.body());
        assertEquals("cold", cold.headers().firstValue("Thaw-Start").orElseThrow());
        String timing = cold.headers().firstValue("Server-Timing").orElseThrow();
        assertTrue(timing.contains("tier;desc=\"host-cache\""), timing);
        assertEquals(Images.manifest(store, "mlp:1").samples().get(0).response().get("argmax"),
            json(cold).get("argmax"));
        assertEquals("host-cache", json(get(port, "/v1/functions/mlp")).path("instances").get(0).path("tier").asText());
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (cache.stats().pinnedBytes() > 0 && System.nanoTime() < deadline) {
          Thread.sleep(10);
        }
        assertEquals(0, cache.stats().pinnedBytes(), "the lease is given back once the worker has every byte");
        HttpResponse<String> warm = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
        assertEquals("warm", warm.headers().firstValue("Thaw-Start").orElseThrow());
        assertTrue(!warm.headers().firstValue("Server-Timing").orElseThrow().contains("tier"), "warm names no tier");

        // Registered by PUT: 1 MiB of weights do not fit a 256 KiB cache; the store serves, and the state says why.
        HttpResponse<String> put = ServerFixture.send(ServerFixture.request(port, "/v1/functions/big")
            .header("Authorization", "Bearer " + TOKEN).header("Content-Type", "application/json")
            .PUT(HttpRequest.BodyPublishers.ofString("{\"image\": \"big:1\"}")).build());
        assertTrue(put.statusCode() / 100 == 2, put.body());
        JsonNode big = await(port, "big", s -> s.path("image").path("hostCache").asText().equals("store"));
        assertTrue(big.path("image").path("reason").asText().contains("cannot hold"), big.toString());
        awaitReady(port);
        StringBuilder inputs = new StringBuilder("{\"inputs\": [[");
        for (int i = 0; i < 256; i++) {
          inputs.append(i == 0 ? "" : ", ").append(i % 7);
        }
        HttpResponse<String> bigCold = postJson(port, "/v1/functions/big/invoke", inputs.append("]]}").toString());
        assertEquals(200, bigCold.statusCode(), bigCold.body());
        assertTrue(bigCold.headers().firstValue("Server-Timing").orElseThrow().contains("tier;desc=\"store\""));

        String metrics = get(port, "/metrics").body();
        assertTrue(restoreBytes(metrics, "mlp", "host-cache") > 0, metrics);
        assertTrue(restoreBytes(metrics, "big", "store") >= 1 << 20, metrics);
      }
      assertTrue(pool.pids().isEmpty(), "every worker gone with the server");
    }
  }

  private static double restoreBytes(String metrics, String function, String tier) {
    return metrics.lines().filter(l -> l.startsWith("thaw_restore_bytes_total{") && l.contains("function=\""
            + function + "\"") && l.contains("tier=\"" + tier + "\""))
        .mapToDouble(l -> Double.parseDouble(l.substring(l.lastIndexOf(' ') + 1))).sum();
  }

  private static JsonNode await(int port, String function, Predicate<JsonNode> done) throws Exception {
    JsonNode s = null;
    for (int i = 0; i < 3000; i++) {
      s = json(get(port, "/v1/functions/" + function));
      if (done.test(s)) {
        return s;
      }
      Thread.sleep(10);
    }
    throw new AssertionError("function " + function + " never reached the expected state: " + s);
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
