package dev.thaw.server;

import static dev.thaw.server.ServerFixture.JSON;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.function.TokenRequest;
import dev.thaw.examples.llama.LlamaCheckpoint;
import dev.thaw.examples.llama.LlamaConfig;
import dev.thaw.examples.llama.LlamaConfig.Architecture;
import dev.thaw.examples.llama.LlamaRankFunction;
import dev.thaw.examples.llama.LlamaTensorParallel;
import dev.thaw.examples.llama.SeededLlamaWeights;
import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.FastCdcChunker;
import dev.thaw.image.build.GroupImageBuilder;
import dev.thaw.image.restore.ImageRestoreException;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.PoolStats;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.runtime.function.GroupFunction;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.ImageInfo;
import dev.thaw.server.impl.InProcessInstances;
import dev.thaw.server.impl.PoolInstances;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A tensor-parallel group image served by the real server over pool-backed instances on two simulated peer devices
 * (the real store, the host cache, worker processes): registered by the group's tag, every rank staged into the host
 * cache; a cold invoke places the group on both devices, one worker becomes it (rank 1 in the context its helper link
 * opened), and the answer is the never-imaged split's ids; warm again; scaled to zero its worker exits (a group is
 * never recycled) and the next cold start gives the same ids. A sampling request, a rank's own tag and a group on a
 * server whose instances serve no groups are refused, naming why.
 */
class TensorParallelServingTest {

  /** Splits two ways: heads, key-value heads and the MLP divide by 2. */
  static final LlamaConfig TINY = new LlamaConfig("tp-serve-tiny", Architecture.LLAMA, 64, 2, 4, 4, 32, 128, 97, 64,
      1e-5f, 10000, null, false, false, 0, HalfType.BF16);
  static final SeededLlamaWeights WEIGHTS = new SeededLlamaWeights(TINY, 11);
  static final int[][] PROMPTS = {{3, 14, 15, 92, 65, 35, 89}, {26, 43, 38}};
  static final int NEW_TOKENS = 5;

  @TempDir
  Path dir;

  @Test
  void aGroupColdStartsOnTwoDevicesThroughTheServerAndAnswersTheSplitsIds() throws Exception {
    Path storePath = dir.resolve("store");
    JsonNode expected;
    try (RocksChunkStore store = ServerFixture.openStore(storePath)) {
      expected = build(store, "tiny-tp:1", dir.resolve("ckpt"));
      ImageRestoreException rank = assertThrows(ImageRestoreException.class,
          () -> ImageInfo.read(store, "tiny-tp-rank0:1"));
      assertTrue(rank.getMessage().contains("register the group's tag"), rank.getMessage());
      ImageInfo group = ImageInfo.read(store, "tiny-tp:1");
      assertEquals(2, group.ranks());
      try (SimDriver one = SimDriver.open(new SimOptions())) {
        RuntimeException e = assertThrows(RuntimeException.class, () -> ThawServer.start(new ServerOptions()
            .setPort(0).addFunction("tp", new FunctionOptions().setImage("tiny-tp:1")), store,
            new InProcessInstances(one, store)).close());
        assertTrue(messages(e).contains("only pool-backed instances serve"), messages(e));
      }
    }
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(2))) {
      HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(64L << 20));
      ContextPool pool = ContextPool.create(ServerFixture.simPool(storePath, cache.path(), List.of(0, 1))
          .setHelperSlotBytes(1 << 20).setHelperMinFreeBytes(0)
          .setEnvironment(Map.of("THAW_DEVICE", "sim", "THAW_SIM_DEVICES", "2", "THAW_SIM_COPY_GBPS", "0.05")));
      PoolInstances instances = new PoolInstances(pool, cache, 0, store, storePath, driver.devices(),
          Duration.ofSeconds(60), Duration.ofSeconds(1));
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
              .addFunction("tp", new FunctionOptions().setImage("tiny-tp:1").setKeepAlive(Duration.ofSeconds(1))),
          store, instances)) {
        int port = server.port();
        JsonNode staged = ServerFixture.awaitState(port, "tp",
            s -> s.path("image").path("hostCache").asText().equals("cached"));
        assertEquals(2, staged.path("image").path("ranks").size(), staged.toString());
        ServerFixture.awaitReady(port);
        String request = TokenRequest.body(PROMPTS, NEW_TOKENS, false).toString();

        HttpResponse<String> cold = postJson(port, "/v1/functions/tp/invoke", request);
        assertEquals(200, cold.statusCode(), cold.body());
        assertEquals("cold", cold.headers().firstValue("Thaw-Start").orElseThrow());
        String timing = cold.headers().firstValue("Server-Timing").orElseThrow();
        assertTrue(timing.contains("tier;desc=\"host-cache\""), timing);
        assertEquals(expected, json(cold).get("tokens"));
        JsonNode up = ServerFixture.awaitState(port, "tp", x -> x.path("instances").size() == 1);
        assertEquals("[0,1]", up.path("instances").path(0).path("devices").toString(), up.toString());

        HttpResponse<String> warm = postJson(port, "/v1/functions/tp/invoke", request);
        assertEquals(200, warm.statusCode(), warm.body());
        assertEquals("warm", warm.headers().firstValue("Thaw-Start").orElseThrow());
        assertEquals(expected, json(warm).get("tokens"));

        HttpResponse<String> sampled = postJson(port, "/v1/functions/tp/invoke",
            "{\"tokens\": [[1, 2, 3]], \"maxNewTokens\": 2, \"temperature\": 0.8}");
        assertEquals(400, sampled.statusCode(), sampled.body());
        assertTrue(sampled.body().contains("decodes greedily") || sampled.body().contains("unknown field"),
            sampled.body());

        ServerFixture.awaitState(port, "tp", s -> s.path("state").asText().equals("cold"));
        HttpResponse<String> again = postJson(port, "/v1/functions/tp/invoke", request);
        assertEquals(200, again.statusCode(), again.body());
        assertEquals("cold", again.headers().firstValue("Thaw-Start").orElseThrow());
        assertEquals(expected, json(again).get("tokens"));
        assertEquals(0, pool.stats().stream().mapToLong(PoolStats::recycled).sum(),
            "a group's worker exits when its instance scales to zero: never recycled");

        // Its state names every rank's tier state and the devices its instance holds.
        JsonNode state = ServerFixture.awaitState(port, "tp", s -> s.path("instances").size() == 1);
        JsonNode ranks = state.path("image").path("ranks");
        assertEquals(2, ranks.size(), state.toString());
        for (JsonNode rank : ranks) {
          assertEquals("cached", rank.path("hostCache").asText(), state.toString());
          assertTrue(rank.path("stagedBytes").asLong() > 0, state.toString());
        }
        assertEquals("[0,1]", state.path("instances").path(0).path("devices").toString(), state.toString());

        // Unregistered, the group and its ranks leave the tiers: nothing of them stays staged or prepared.
        HttpResponse<String> deleted = ServerFixture.send(ServerFixture.request(port, "/v1/functions/tp").DELETE()
            .header("Authorization", "Bearer " + server.adminToken()).build());
        assertEquals(200, deleted.statusCode(), deleted.body());
        assertEquals(404, ServerFixture.get(port, "/v1/functions/tp").statusCode());
        for (String rank : List.of("tiny-tp-rank0:1", "tiny-tp-rank1:1")) {
          assertEquals(null, instances.tiers().state(rank), rank + "'s host-cache state is gone");
          assertEquals(null, instances.imageState(rank), rank);
        }
        assertEquals(null, instances.tiers().preparedGroup("tiny-tp:1"), "the group is prepared no more");
        assertEquals(null, instances.imageState("tiny-tp:1"));
        awaitUnpinned(cache);
      }
      assertTrue(pool.pids().isEmpty(), "every worker gone with the server");
    }
  }

  /**
   * A group built from a checkpoint folder with a tokenizer ({@link ChatModel}) serves OpenAI's completions by text,
   * greedily: temperature 0 answers (streamed too), a temperature above it is refused OpenAI-style, and a native
   * request by text is answered with the ids' text.
   */
  @Test
  void aGroupWithATokenizerServesCompletionsGreedilyAndRefusesSampling() throws Exception {
    Path folder = ChatModel.write(dir.resolve("chat"), true);
    Path storePath = dir.resolve("store");
    ObjectNode config = JSON.createObjectNode().put("path", folder.toString()).put("maxBatch", 1)
        .put("maxTokens", 48);
    try (RocksChunkStore store = ServerFixture.openStore(storePath);
        SimDriver two = SimDriver.open(new SimOptions().setDeviceCount(2));
        GroupFunction.Recording recording = new LlamaRankFunction().record(two, new int[] {0, 1}, config)) {
      ObjectNode sample = JSON.createObjectNode();
      sample.putArray("tokens").addArray().add(ChatModel.BOS).add(40).add(41);
      sample.put("maxNewTokens", 2);
      new GroupImageBuilder(store, new FastCdcChunker()).build("chat-tp:1", LlamaRankFunction.class.getName(),
          recording, 2, List.of(sample), new BuildOptions(), ProgressListener.NONE);
    }
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(2))) {
      HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(64L << 20));
      ContextPool pool = ContextPool.create(ServerFixture.simPool(storePath, cache.path(), List.of(0, 1)));
      PoolInstances instances = new PoolInstances(pool, cache, 0, store, storePath, driver.devices(),
          Duration.ofSeconds(60), Duration.ofSeconds(1));
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
          .addFunction("tp", new FunctionOptions().setImage("chat-tp:1")), store, instances)) {
        int port = server.port();
        ServerFixture.awaitReady(port);
        HttpResponse<String> greedy = postJson(port, "/v1/completions",
            "{\"model\": \"tp\", \"prompt\": \"Hello there\", \"max_tokens\": 3, \"temperature\": 0}");
        assertEquals(200, greedy.statusCode(), greedy.body());
        JsonNode c = json(greedy);
        assertTrue(c.path("choices").path(0).path("text").isTextual(), greedy.body());
        assertEquals(3, c.path("usage").path("completion_tokens").asInt(), greedy.body());

        HttpResponse<String> streamed = postJson(port, "/v1/completions",
            "{\"model\": \"tp\", \"prompt\": \"Hello there\", \"max_tokens\": 3, \"temperature\": 0, "
                + "\"stream\": true}");
        assertEquals(200, streamed.statusCode(), streamed.body());
        assertTrue(streamed.body().strip().endsWith("data: [DONE]"), streamed.body());

        HttpResponse<String> sampled = postJson(port, "/v1/completions",
            "{\"model\": \"tp\", \"prompt\": \"Hello there\", \"max_tokens\": 3, \"temperature\": 0.7}");
        assertEquals(400, sampled.statusCode(), sampled.body());
        assertTrue(sampled.body().contains("decodes greedily only"), sampled.body());

        HttpResponse<String> text = postJson(port, "/v1/functions/tp/invoke",
            "{\"text\": \"Hello there\", \"maxNewTokens\": 2}");
        assertEquals(200, text.statusCode(), text.body());
        assertTrue(json(text).path("text").path(0).isTextual(), text.body());
        assertEquals(2, json(text).path("tokens").path(0).size(), text.body());
      }
    }
  }

  @Test
  void aGroupOfTwoOnAOneDevicePoolIsRefusedAtRegistrationNamingTheDeviceCount() throws Exception {
    Path storePath = dir.resolve("store");
    try (RocksChunkStore store = ServerFixture.openStore(storePath)) {
      build(store, "tiny-tp:1", dir.resolve("ckpt"));
    }
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(64L << 20));
      ContextPool pool = ContextPool.create(ServerFixture.simPool(storePath, cache.path(), List.of(0))
          .setIdleTarget(0));
      PoolInstances instances = new PoolInstances(pool, cache, 0, store, storePath, driver.devices(),
          Duration.ofSeconds(60), Duration.ofSeconds(1));
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0), store, instances)) {
        HttpResponse<String> put = ServerFixture.send(ServerFixture.request(server.port(), "/v1/functions/tp")
            .header("Authorization", "Bearer " + server.adminToken()).header("Content-Type", "application/json")
            .PUT(HttpRequest.BodyPublishers.ofString("{\"image\": \"tiny-tp:1\"}")).build());
        assertEquals(400, put.statusCode(), put.body());
        assertTrue(put.body().contains("a group of 2 ranks") && put.body().contains("this node has 1 device(s)"),
            put.body());
        assertEquals(404, ServerFixture.get(server.port(), "/v1/functions/tp").statusCode(), "nothing registered");
        assertEquals(null, instances.tiers().state("tiny-tp-rank0:1"), "no rank staged for a refused group");
      }
      assertTrue(pool.pids().isEmpty(), "every worker gone with the server");
    }
  }

  /** Waits until no lease pins the host cache (a retired instance's worker gives its ranks' leases back as it ends). */
  private static void awaitUnpinned(HostImageCache cache) throws InterruptedException {
    for (int i = 0; i < 600 && cache.stats().pinnedBytes() > 0; i++) {
      Thread.sleep(50);
    }
    assertEquals(0, cache.stats().pinnedBytes(), cache.stats().toString());
  }

  /**
   * Builds the split of TINY over devices 0 and 1 under {@code tag} as {@code thaw build --devices 0,1} does, from a
   * checkpoint of its weights saved into {@code folder}; returns the never-imaged split's new ids.
   */
  private static JsonNode build(RocksChunkStore store, String tag, Path folder) throws Exception {
    int[] devices = {0, 1};
    LlamaCheckpoint.save(WEIGHTS, folder, 1);
    ObjectNode config = JSON.createObjectNode().put("path", folder.toString()).put("maxBatch", 2).put("maxTokens", 32);
    try (SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(2))) {
      try (GroupFunction.Recording recording = new LlamaRankFunction().record(driver, devices, config)) {
        new GroupImageBuilder(store, new FastCdcChunker()).build(tag, LlamaRankFunction.class.getName(), recording,
            devices.length, List.of(TokenRequest.body(PROMPTS, NEW_TOKENS, false)), new BuildOptions(),
            ProgressListener.NONE);
      }
      try (LlamaTensorParallel split = LlamaTensorParallel.open(driver, devices, WEIGHTS, 2, 32)) {
        return ids(split.generate(PROMPTS, NEW_TOKENS).tokens()).get("tokens");
      }
    }
  }

  private static String messages(Throwable e) {
    StringBuilder all = new StringBuilder();
    for (Throwable t = e; t != null; t = t.getCause()) {
      all.append(t.getMessage()).append(" / ");
    }
    return all.toString();
  }

  private static ObjectNode ids(int[][] tokens) {
    ObjectNode out = JSON.createObjectNode();
    ArrayNode all = out.putArray("tokens");
    for (int[] row : tokens) {
      ArrayNode a = all.addArray();
      for (int id : row) {
        a.add(id);
      }
    }
    return out;
  }
}
