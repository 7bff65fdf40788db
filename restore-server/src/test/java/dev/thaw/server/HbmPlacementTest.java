package dev.thaw.server;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.PlacementCosts;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.PoolInstances;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Placement by where an image's weights already are, on two simulated devices ({@code THAW_SIM_DEVICES=2}) with a
 * pool of real worker processes per device, the real store and a real server on loopback: a function scaled in from
 * device 1 leaves its weights in device 1's HBM tier, and its next cold start goes back to device 1 and maps them
 * ({@code tier;desc="hbm"}), although device 0 then has more free budget.
 */
class HbmPlacementTest {

  /** Layer sizes: "big" takes more budget than "wide", so the small function lands next to "wide", on device 1. */
  private static final String BIG = "{\"layers\": [1024, 4096, 256], \"seed\": 5, \"maxBatch\": 1}";
  private static final String WIDE = "{\"layers\": [512, 2048, 256], \"seed\": 11, \"maxBatch\": 1}";

  @TempDir
  Path dir;

  @Test
  void aFunctionScaledInFromDevice1ComesBackThereFromTheHbmTierThoughDevice0HasMoreRoom() throws Exception {
    Path storePath = dir.resolve("store");
    String big = sample(1024);
    String wide = sample(512);
    try (RocksChunkStore store = ServerFixture.openStore(storePath)) {
      ServerFixture.build(store, "big:1", ServerFixture.MLP, BIG, big, 0);
      ServerFixture.build(store, "wide:1", ServerFixture.MLP, WIDE, wide, 0);
      ServerFixture.buildMlp(store, "small:1");
    }
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(2))) {
      HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(96 << 20));
      ContextPool pool = ContextPool.create(ServerFixture.simPool(storePath, cache.path(), List.of(0, 1)));
      Duration brief = Duration.ofMillis(200);
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0).setGpuMemoryBytes(256L << 20)
              .addFunction("big", new FunctionOptions().setImage("big:1").setMinInstances(1))
              .addFunction("wide", new FunctionOptions().setImage("wide:1").setKeepAlive(brief))
              .addFunction("small", new FunctionOptions().setImage("small:1").setKeepAlive(Duration.ofMinutes(10))),
          // Mapping a tier's slabs priced at nothing: these images copy from the host cache in less than the fixed
          // cost placement gives a tier's map (1 ms), which a model-sized image's copy dwarfs.
          store, new PoolInstances(pool, cache, 128L << 20, store, storePath, driver.devices(),
              Duration.ofSeconds(60), Duration.ofSeconds(1)).placeWith(new PlacementCosts().setTierMapMillis(0),
              (a, b) -> false))) {
        int port = server.port();
        long bigBytes = json(get(port, "/v1/functions/big")).path("deviceBytes").asLong();
        long wideBytes = json(get(port, "/v1/functions/wide")).path("deviceBytes").asLong();
        assertTrue(bigBytes > wideBytes, "big " + bigBytes + " > wide " + wideBytes);
        for (String f : List.of("big", "wide", "small")) {
          ServerFixture.awaitState(port, f, s -> s.path("image").path("hostCache").asText().equals("cached"));
        }
        ServerFixture.awaitReady(port);

        // big (started at registration) → device 0, both empty; wide → device 1, device 0 holds big; small → device 1,
        // as big takes more than wide.
        assertEquals(0, coldOn(port, "big", big, null));
        assertEquals(1, coldOn(port, "wide", wide, "host-cache"));
        assertEquals(1, coldOn(port, "small", ServerFixture.MLP_REQUEST, "host-cache"));

        // big is deleted, wide scales in: their weights stay in their devices' tiers. small stays on device 1.
        HttpResponse<String> deleted = ServerFixture.send(ServerFixture.request(port, "/v1/functions/big").DELETE()
            .header("Authorization", "Bearer " + server.adminToken()).build());
        assertEquals(200, deleted.statusCode(), deleted.body());
        JsonNode held = ServerFixture.awaitState(port, "wide", s -> s.path("state").asText().equals("cold")
            && s.path("image").path("hbmBytes").path("1").asLong() > 0);
        assertTrue(held.path("image").path("hbmBytes").path("0").isMissingNode(), "none on device 0: " + held);

        // Free budget alone would pick device 0 (empty) over device 1 (small's there): the tier's copy decides.
        ServerFixture.awaitReady(port);
        assertEquals(1, coldOn(port, "wide", wide, "hbm"));
        ColdStartTrace t = ColdStartTrace.awaitWorkerRows(port, "wide", 2);
        assertEquals("wide cold start #2 on device 1", t.title());
        assertTrue(t.becomeRow().contains("hbm take"), t.becomeRow().toString());
        assertEquals("hbm", t.span(10, "BECOME wide:1").path("args").path("source").asText());
        assertEquals(1, t.span(10, "BECOME wide:1").path("args").path("device").asInt(), "the worker's own device");
      }
      assertTrue(pool.pids().isEmpty(), "every worker gone with the server");
    }
  }

  /**
   * Invokes {@code function} cold, checks it answered from {@code tier} (null: any), and returns the device its start was placed
   * on (from its cold start's trace, which outlives the instance).
   */
  private static int coldOn(int port, String function, String request, String tier) throws Exception {
    int before = ColdStartTrace.read(port, function).size();
    HttpResponse<String> r = postJson(port, "/v1/functions/" + function + "/invoke", request);
    assertEquals(200, r.statusCode(), r.body());
    assertEquals("cold", r.headers().firstValue("Thaw-Start").orElseThrow(), function);
    String timing = r.headers().firstValue("Server-Timing").orElseThrow();
    assertTrue(tier == null || timing.contains("tier;desc=\"" + tier + "\""), function + ": " + timing);
    List<ColdStartTrace> all = ColdStartTrace.read(port, function);
    assertEquals(before + 1, all.size());
    String title = all.get(all.size() - 1).title();
    return Integer.parseInt(title.substring(title.lastIndexOf(' ') + 1));
  }

  private static String sample(int inputs) {
    StringBuilder request = new StringBuilder("{\"inputs\": [[");
    for (int i = 0; i < inputs; i++) {
      request.append(i == 0 ? "" : ", ").append(i % 5 - 2);
    }
    return request.append("]]}").toString();
  }
}
