package dev.thaw.server;

import static dev.thaw.server.ServerFixture.JSON;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.Images;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.PlacementCosts;
import dev.thaw.pool.WeightsProbeFunction;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.PoolInstances;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Cold starts placed and restored across two simulated devices that are peers (a modelled peer link, host copies
 * slow enough that a restore spans several runs), through the real server with a pool of worker processes per device,
 * the real store and the host cache, a budget of one instance per device: a cold start from the host cache goes
 * through both devices' links ({@code tier;desc="host-cache-multilink"}), its weights land byte for byte (the
 * function answers their digests, read through gated downloads, as at build); the next one maps its device's HBM tier
 * ({@code hbm}); with the other device serving a request, a start borrows no link ({@code host-cache}); with its
 * device full, a start on the other device pulls the weights from the first device's tier over the peer link
 * ({@code hbm-peer}).
 */
class MultiLinkServingTest {

  private static final String DIGEST = "{\"op\": \"digest\"}";
  private static final String SLEEP = "{\"op\": \"sleep\", \"millis\": 0}";
  /** Six weights of 3 MiB: a restore of several runs, one instance per device in the budget below. */
  private static final String CONFIG = "{\"buffers\": 6, \"bytes\": 3145728, \"seed\": %d}";

  @TempDir
  Path dir;

  @Test
  void coldStartsGoThroughIdleLinksAndTheOtherDevicesTierAndLandEveryByte() throws Exception {
    Path storePath = dir.resolve("store");
    Map<String, JsonNode> built = new HashMap<>();
    try (RocksChunkStore store = ServerFixture.openStore(storePath)) {
      int seed = 1;
      for (String tag : List.of("w:1", "v:1", "blocker:1")) {
        ServerFixture.build(store, tag, WeightsProbeFunction.class.getName(), String.format(CONFIG, seed++), DIGEST,
            0);
        built.put(tag, Images.manifest(store, tag).samples().get(0).response());
      }
    }
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(2))) {
      HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(96L << 20));
      ContextPool pool = ContextPool.create(ServerFixture.simPool(storePath, cache.path(), List.of(0, 1))
          .setHelperSlotBytes(1 << 20).setHelperMinFreeBytes(0)
          .setEnvironment(Map.of("THAW_DEVICE", "sim", "THAW_SIM_DEVICES", "2", "THAW_SIM_COPY_GBPS", "0.05",
              "THAW_SIM_PEER_GBPS", "1")));
      // Longer than a restore here takes on a loaded machine (18 MiB at the sim's 0.05 GB/s a link): an instance that
      // scales in before its weights are all resident offers none to the tier.
      Duration brief = Duration.ofSeconds(2);
      // Mapping a tier's slabs priced at nothing: the images here are small enough that its real fixed cost would
      // outweigh every copy.
      PoolInstances instances = new PoolInstances(pool, cache, 64L << 20, store, storePath, driver.devices(),
          Duration.ofSeconds(60), Duration.ofSeconds(1)).placeWith(new PlacementCosts().setTierMapMillis(0),
          driver::canAccessPeer);
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0).setGpuMemoryBytes(24L << 20)
              .addFunction("w", new FunctionOptions().setImage("w:1").setKeepAlive(brief))
              .addFunction("v", new FunctionOptions().setImage("v:1").setKeepAlive(Duration.ofMinutes(10)))
              .addFunction("blocker", new FunctionOptions().setImage("blocker:1")
                  .setKeepAlive(Duration.ofMinutes(10))), store, instances)) {
        int port = server.port();
        for (String f : List.of("w", "v", "blocker")) {
          ServerFixture.awaitState(port, f, s -> s.path("image").path("hostCache").asText().equals("cached"));
        }
        ServerFixture.awaitReady(port);

        // Both devices idle: device 0 (the lower ordinal), through its link and device 1's. (Not asked for digests:
        // reading the weights through the session before they are write-protected would keep them out of the tier.)
        JsonNode slept = JSON.createObjectNode().put("slept", 0);
        assertEquals(0, cold(port, "w", SLEEP, "host-cache-multilink", slept));
        JsonNode kept = ServerFixture.awaitState(port, "w", s -> s.path("state").asText().equals("cold")
            && s.path("image").path("hbmBytes").path("0").asLong() > 0);
        // Its weights stayed in device 0's tier: mapped there again.
        assertEquals(0, cold(port, "w", DIGEST, "hbm", built.get("w:1")), kept.toString());
        ServerFixture.awaitState(port, "w", s -> s.path("state").asText().equals("cold"));

        // The blocker fills device 0 (ties go to the lower ordinal), its weights through both links; then it serves a
        // long request there.
        assertEquals(0, cold(port, "blocker", DIGEST, "host-cache-multilink", built.get("blocker:1")));
        CompletableFuture<HttpResponse<String>> sleeping = ServerFixture.background(() -> postJson(port,
            "/v1/functions/blocker/invoke", "{\"op\": \"sleep\", \"millis\": 3000}"));
        ServerFixture.awaitState(port, "blocker", s -> s.path("instances").path(0).path("state").asText()
            .equals("busy"));
        // Device 0 is busy: v goes to device 1 through device 1's link alone.
        assertEquals(1, cold(port, "v", DIGEST, "host-cache", built.get("v:1")));
        assertEquals(200, sleeping.get(60, TimeUnit.SECONDS).statusCode());

        // Device 0 is full, device 1 has room once v is gone: w's weights come from device 0's tier over the peer link.
        HttpResponse<String> deleted = ServerFixture.send(ServerFixture.request(port, "/v1/functions/v").DELETE()
            .header("Authorization", "Bearer " + server.adminToken()).build());
        assertEquals(200, deleted.statusCode(), deleted.body());
        ServerFixture.awaitReady(port);
        assertEquals(1, cold(port, "w", DIGEST, "hbm-peer", built.get("w:1")));
        ColdStartTrace t = ColdStartTrace.awaitWorkerRows(port, "w", 3);
        assertTrue(t.becomeRow().contains("peer take"), t.becomeRow().toString());
        assertEquals("hbm-peer", t.span(10, "BECOME w:1").path("args").path("source").asText());
        String metrics = ServerFixture.get(port, "/metrics").body();
        Map<String, Integer> starts = Map.of("host-cache-multilink", 2, "hbm", 1, "host-cache", 1, "hbm-peer", 1);
        starts.forEach((tier, n) -> assertTrue(metrics.contains("thaw_cold_starts_total{tier=\"" + tier + "\"} "
            + n + ".0"), tier + ":\n" + metrics));
      }
      assertTrue(pool.pids().isEmpty(), "every worker gone with the server");
    }
  }

  @Test
  void theHelperOptionsRoundTripAndBadOnesAreRefusedSayingWhy() {
    ServerOptions o = ServerOptions.fromJson(JSON.createObjectNode().put("maxHelpers", 1).put("helperShare", 0.25));
    assertEquals(1, o.maxHelpers());
    assertEquals(0.25, o.helperShare());
    ServerOptions back = ServerOptions.fromJson(o.toJson());
    assertEquals(1, back.maxHelpers());
    assertEquals(0.25, back.helperShare());
    assertEquals(ServerOptions.DEFAULT_HELPER_SHARE, new ServerOptions().helperShare());
    for (String bad : List.of("{\"helperShare\": 0}", "{\"helperShare\": 1.5}", "{\"helperShare\": \"half\"}",
        "{\"maxHelpers\": -1}", "{\"maxHelpers\": 16}")) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
          () -> ServerOptions.fromJson(JSON.readTree(bad)));
      assertTrue(e.getMessage().contains("helper") || e.getMessage().contains("Helpers"), e.getMessage());
    }
  }

  /**
   * Invokes {@code function} cold with {@code request}, checks the answer is {@code answer} and the start came in by
   * {@code way}, and returns the device its start was placed on (from its cold start's trace).
   */
  private static int cold(int port, String function, String request, String way, JsonNode answer) throws Exception {
    int before = ColdStartTrace.read(port, function).size();
    HttpResponse<String> r = postJson(port, "/v1/functions/" + function + "/invoke", request);
    assertEquals(200, r.statusCode(), r.body());
    assertEquals("cold", r.headers().firstValue("Thaw-Start").orElseThrow(), function);
    String timing = r.headers().firstValue("Server-Timing").orElseThrow();
    assertTrue(timing.contains("tier;desc=\"" + way + "\""), function + ": " + timing);
    assertEquals(answer, json(r), function + "'s answer");
    List<ColdStartTrace> all = ColdStartTrace.read(port, function);
    assertEquals(before + 1, all.size());
    String title = all.get(all.size() - 1).title();
    return Integer.parseInt(title.substring(title.lastIndexOf(' ') + 1));
  }
}
