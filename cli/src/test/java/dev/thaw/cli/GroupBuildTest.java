package dev.thaw.cli;

import static dev.thaw.cli.ThawCliTest.assertOneLineError;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.cli.ThawCliTest.Run;
import dev.thaw.examples.function.TokenRequest;
import dev.thaw.examples.llama.LlamaCheckpoint;
import dev.thaw.examples.llama.LlamaConfig;
import dev.thaw.examples.llama.LlamaConfig.Architecture;
import dev.thaw.examples.llama.LlamaRankFunction;
import dev.thaw.examples.llama.LlamaTensorParallel;
import dev.thaw.examples.llama.SeededLlamaWeights;
import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.examples.mlp.MlpFunction;
import dev.thaw.image.GroupImage;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.FunctionOptions;
import dev.thaw.server.ServerFixture;
import dev.thaw.server.ServerOptions;
import dev.thaw.server.ThawServer;
import dev.thaw.server.impl.PoolInstances;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code thaw build --devices}: a tensor-parallel Llama built from a checkpoint folder on two simulated peer devices
 * into one image per rank in the real store, then served by its tag through a real server with worker processes, its
 * cold answer the split's ids. Bad devices, a function that is no group and a split the model does not divide are
 * refused, naming why, with nothing committed.
 */
class GroupBuildTest {

  /** Heads, key-value heads and the MLP divide by 2; the vocabulary is odd (split unevenly). */
  static final LlamaConfig TINY = new LlamaConfig("cli-tp-tiny", Architecture.LLAMA, 64, 2, 4, 4, 32, 128, 97, 64,
      1e-5f, 10000, null, false, false, 0, HalfType.BF16);
  static final int[][] PROMPTS = {{3, 14, 15, 92, 65, 35, 89}};
  static final int NEW_TOKENS = 4;
  static final ObjectMapper JSON = new ObjectMapper();

  @TempDir
  Path dir;

  /** A CLI whose store is under {@code dir} and whose driver is a sim of two peer devices. */
  private ThawCli cli() {
    return new ThawCli(Map.of("THAW_STORE", dir.resolve("store").toString()),
        (choice, env) -> SimDriver.open(new SimOptions().setDeviceCount(2)));
  }

  private Path checkpoint() throws Exception {
    Path folder = dir.resolve("ckpt");
    LlamaCheckpoint.save(new SeededLlamaWeights(TINY, 9), folder, 2);
    return folder;
  }

  @Test
  void aGroupBuiltByTheCliServesItsSplitsIdsByItsTag() throws Exception {
    Path folder = checkpoint();
    Path request = Files.writeString(dir.resolve("sample.json"), TokenRequest.body(PROMPTS, NEW_TOKENS, false)
        .toString());
    String config = "{\"path\": \"" + folder + "\", \"maxBatch\": 1, \"maxTokens\": 24}";
    Run b = ThawCliTest.run(cli(), "build", "--device", "sim", "--function", LlamaRankFunction.class.getName(),
        "--config", config, "--tag", "tiny-tp:1", "--devices", "0,1", "--sample-request", request.toString());
    assertEquals(0, b.exit(), b.err());
    assertTrue(b.out().startsWith("built    tiny-tp:1, a group of 2 ranks on devices [0, 1]\n"), b.out());
    assertTrue(b.out().contains("rank 1   tiny-tp-rank1:1 on device 1"), b.out());
    Run inspect = ThawCliTest.run(cli(), "inspect", "tiny-tp:1");
    assertEquals(0, inspect.exit(), inspect.err());
    assertTrue(inspect.out().startsWith("tag        tiny-tp:1 (a tensor-parallel group of 2 ranks, build "),
        inspect.out());
    assertTrue(inspect.out().contains("rank 1     tiny-tp-rank1:1, recorded on device 1: "), inspect.out());
    Run inspectJson = ThawCliTest.run(cli(), "inspect", "tiny-tp:1", "--json");
    JsonNode described = JSON.readTree(inspectJson.out());
    assertEquals(2, described.path("ranks").size(), inspectJson.out());
    assertEquals(1, described.path("ranks").path(1).path("device").asInt(), inspectJson.out());

    JsonNode expected;
    try (SimDriver two = SimDriver.open(new SimOptions().setDeviceCount(2));
        LlamaCheckpoint weights = LlamaCheckpoint.open(folder);
        LlamaTensorParallel split = LlamaTensorParallel.open(two, new int[] {0, 1}, weights, 1, 24)) {
      int[][] ids = split.generate(PROMPTS, NEW_TOKENS).tokens();
      expected = JSON.valueToTree(ids);
    }
    Path storePath = dir.resolve("store");
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true))) {
      GroupImage.Stored group = GroupImage.read(store, "tiny-tp:1");
      assertEquals(2, group.ranks().size());
      assertEquals(2, group.group().config().path("ranks").asInt(), group.group().config().toString());
      assertEquals(expected, group.ranks().get(0).samples().get(0).response().get("tokens"),
          "the sample ran through the recording as the split answers");

      try (SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(2))) {
        HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(64L << 20));
        ContextPool pool = ContextPool.create(ServerFixture.simPool(storePath, cache.path(), List.of(0, 1)));
        PoolInstances instances = new PoolInstances(pool, cache, 0, store, storePath, driver.devices(),
            Duration.ofSeconds(60), Duration.ofSeconds(1));
        try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
            .addFunction("tp", new FunctionOptions().setImage("tiny-tp:1")), store, instances)) {
          int port = server.port();
          ServerFixture.awaitReady(port);
          HttpResponse<String> r = ServerFixture.postJson(port, "/v1/functions/tp/invoke",
              TokenRequest.body(PROMPTS, NEW_TOKENS, false).toString());
          assertEquals(200, r.statusCode(), r.body());
          assertEquals(expected, ServerFixture.json(r).get("tokens"));
        }
      }
    }
  }

  @Test
  void badDevicesAFunctionThatIsNoGroupAndAnUndividedSplitAreRefusedAndNothingIsCommitted() throws Exception {
    Path folder = checkpoint();
    String config = "{\"path\": \"" + folder + "\", \"maxBatch\": 1, \"maxTokens\": 24}";
    String rank = LlamaRankFunction.class.getName();
    for (List<String> devices : List.of(List.of("0"), List.of("0,0"), List.of("0,-1"))) {
      Run r = ThawCliTest.run(cli(), "build", "--device", "sim", "--function", rank, "--config", config, "--tag",
          "bad:1", "--devices", devices.get(0));
      assertEquals(ThawCli.EXIT_USAGE, r.exit(), devices + ": " + r.err());
      assertTrue(r.err().contains("--devices names two devices or more, each once"), r.err());
    }
    Run far = ThawCliTest.run(cli(), "build", "--device", "sim", "--function", rank, "--config", config, "--tag",
        "bad:1", "--devices", "0,2");
    assertEquals(ThawCli.EXIT_USAGE, far.exit(), far.err());
    assertOneLineError(far, "--devices [0, 2]: this node has 2 device(s)");

    Run single = ThawCliTest.run(cli(), "build", "--device", "sim", "--function", MlpFunction.class.getName(),
        "--config", "{\"layers\": [8, 4]}", "--tag", "bad:1", "--devices", "0,1");
    assertEquals(ThawCli.EXIT_USAGE, single.exit(), single.err());
    assertTrue(single.err().contains("is not a GroupFunction"), single.err());

    // Three heads do not split over two ranks: the function refuses the split, said as the build's init failure.
    Path odd = dir.resolve("odd");
    LlamaCheckpoint.save(new SeededLlamaWeights(new LlamaConfig("cli-tp-odd", Architecture.LLAMA, 64, 1, 3, 3, 32, 128,
        97, 64, 1e-5f, 10000, null, false, false, 0, HalfType.BF16), 9), odd, 1);
    Run undivided = ThawCliTest.run(cli(), "build", "--device", "sim", "--function", rank, "--config",
        "{\"path\": \"" + odd + "\", \"maxBatch\": 1, \"maxTokens\": 24}", "--tag", "bad:1", "--devices", "0,1");
    assertTrue(undivided.exit() != 0, undivided.out());
    assertTrue(undivided.err().contains("recording " + rank + " over devices [0, 1] failed"), undivided.err());

    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(dir.resolve("store"))
        .setReadOnly(true))) {
      assertTrue(store.manifest("bad-rank0:1").isEmpty() && store.manifest("bad-rank1:1").isEmpty(),
          "nothing committed");
    } catch (RuntimeException noStore) {
      // No build got as far as creating the store: nothing committed either.
      assertTrue(noStore.getMessage().contains("store"), noStore.getMessage());
    }
  }
}
