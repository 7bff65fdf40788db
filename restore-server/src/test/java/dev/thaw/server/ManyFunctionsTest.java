package dev.thaw.server;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.Images;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.PoolTestImages;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.PoolInstances;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A node with many functions, through the real pool-backed server on the sim device: more functions than workers
 * hold prepared, than the pool has workers, invoked in random order and concurrently, with workers killed between
 * waves; a worker that dies while idle; an image whose chunk went bad.
 */
class ManyFunctionsTest {

  private static final String TOKEN = "many-functions-token";
  private static final Pattern PID = Pattern.compile("worker pid ([0-9]+)");
  private static final Pattern RECYCLES = Pattern.compile("(?m)^thaw_pool_recycles_total\\{[^}]*device=\"0\"[^}]*\\} "
      + "([0-9.eE+-]+)");
  private static final int IMAGES = 8;
  private static final int FUNCTIONS = 40;

  @TempDir
  Path dir;

  private static ContextPoolOptions pool(Path storePath, int maxWorkers) {
    return ServerFixture.simPool(storePath, null, List.of(0)).setIdleTarget(2).setMaxWorkers(maxWorkers)
        .setMaxPreparedImages(4);
  }

  private static String mlp(int seed) {
    return "{\"layers\": [8, 16, 4], \"seed\": " + seed + ", \"maxBatch\": 8}";
  }

  /**
   * 40 functions over 8 images (each function's answer differs from the others' images), 4 prepared at most, 6
   * instances at most (8 workers, 2 kept idle): two waves of 20 requests in random order from 4 clients, and
   * between them every idle instance's worker is killed. Every answer is 200 and the function's own. A cold start
   * that finds no idle worker waits for one to start (seconds on a loaded two-core machine): the clients wait.
   */
  @Test
  void fortyFunctionsInRandomOrderConcurrentlyWithWorkersKilledBetweenWavesAllAnswerRight() throws Exception {
    Path storePath = dir.resolve("store");
    Map<String, String> expected = new HashMap<>();
    try (RocksChunkStore store = ServerFixture.openStore(storePath)) {
      for (int i = 0; i < IMAGES; i++) {
        ServerFixture.build(store, "mlp:" + i, ServerFixture.MLP, mlp(10 + i), ServerFixture.MLP_REQUEST, 0);
        expected.put("mlp:" + i, Images.manifest(store, "mlp:" + i).samples().get(0).response().get("argmax")
            .toString() + Images.manifest(store, "mlp:" + i).samples().get(0).response().get("outputs"));
      }
    }
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      ContextPool workers = ContextPool.create(pool(storePath, 8));
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0).setAdminToken(TOKEN), store,
          new PoolInstances(workers, store, storePath, driver.devices(), Duration.ofSeconds(60),
              Duration.ofSeconds(1)))) {
        int port = server.port();
        for (int f = 0; f < FUNCTIONS; f++) {
          register(port, "f" + f, "mlp:" + (f % IMAGES));
        }
        assertEquals(FUNCTIONS, json(get(port, "/v1/functions")).path("functions").size());
        Random random = new Random(21);
        ExecutorService clients = Executors.newFixedThreadPool(4);
        try {
          for (int wave = 0; wave < 2; wave++) {
            List<Future<String>> answers = new ArrayList<>();
            for (int r = 0; r < 20; r++) {
              int f = random.nextInt(FUNCTIONS);
              answers.add(clients.submit(() -> {
                HttpResponse<String> a = ServerFixture.send(ServerFixture.request(port, "/v1/functions/f" + f
                    + "/invoke").timeout(Duration.ofMinutes(5)).header("Content-Type", "application/json")
                    .POST(HttpRequest.BodyPublishers.ofString(ServerFixture.MLP_REQUEST)).build());
                JsonNode body = a.statusCode() == 200 ? json(a) : null;
                String got = body == null ? "" : body.get("argmax").toString() + body.get("outputs");
                return a.statusCode() == 200 && got.equals(expected.get("mlp:" + (f % IMAGES))) ? "ok"
                    : "f" + f + ": " + a.statusCode() + " " + a.body();
              }));
            }
            for (Future<String> a : answers) {
              assertEquals("ok", a.get(), "wave " + wave);
            }
            if (wave == 0) {
              assertTrue(killIdleWorkers(port) > 0, "instances were warm after the first wave");
            }
          }
        } finally {
          clients.shutdownNow();
        }
        String metrics = get(port, "/metrics").body();
        assertTrue(metrics.contains("reason=\"lost\""), "workers lost while idle are counted");
        // Instances evicted for room released their workers, which came back blank (recycled) instead of exiting,
        // and answered other functions' images right above.
        Matcher recycled = RECYCLES.matcher(metrics);
        assertTrue(recycled.find(), metrics);
        assertEquals(workers.stats().get(0).recycled(), (long) Double.parseDouble(recycled.group(1)));
        assertTrue(workers.stats().get(0).recycled() > 0, workers.stats().toString());
      }
      assertTrue(workers.pids().isEmpty(), "every worker gone with the server");
    }
  }

  @Test
  void theRecycleLimitIsAServerOption() {
    assertEquals(ServerOptions.DEFAULT_RECYCLE_LIMIT, new ServerOptions().recycleLimit());
    ServerOptions o = ServerOptions.fromJson(ServerFixture.JSON.createObjectNode().put("recycleLimit", 0));
    assertEquals(0, o.recycleLimit());
    assertEquals(0, ServerOptions.fromJson(o.toJson()).recycleLimit(), "the JSON form round-trips");
    assertThrows(IllegalArgumentException.class,
        () -> ServerOptions.fromJson(ServerFixture.JSON.createObjectNode().put("recycleLimit", -1)));
  }

  /** A worker killed while its instance is idle: the instance leaves, and the next request starts a fresh one. */
  @Test
  void aWorkerThatDiesWhileIdleIsDroppedAndTheNextRequestStartsAFreshOne() throws Exception {
    Path storePath = dir.resolve("store");
    try (RocksChunkStore store = ServerFixture.openStore(storePath)) {
      ServerFixture.buildMlp(store, "mlp:1");
    }
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      ContextPool workers = ContextPool.create(pool(storePath, 3));
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
              .addFunction("mlp", new FunctionOptions().setImage("mlp:1")), store,
          new PoolInstances(workers, store, storePath, driver.devices(), Duration.ofSeconds(60),
              Duration.ofSeconds(1)))) {
        int port = server.port();
        assertEquals(200, postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
        long pid = pid(json(get(port, "/v1/functions/mlp")));
        ProcessHandle.of(pid).orElseThrow().destroyForcibly();
        ServerFixture.awaitState(port, "mlp", s -> s.path("instances").isEmpty());
        HttpResponse<String> next = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
        assertEquals(200, next.statusCode(), next.body());
        assertEquals("cold", next.headers().firstValue("Thaw-Start").orElseThrow(), "a fresh instance served it");
      }
    }
  }

  /**
   * An image whose chunk no longer matches its digest: the request that found it gets a 500 naming the image and the
   * chunk, and so does the next, without a worker started for it (no retry storm).
   */
  @Test
  void aDamagedImageIsRefusedNamingItsChunkWithoutAWorkerPerRequest() throws Exception {
    Path storePath = dir.resolve("store");
    Digest victim;
    try (RocksChunkStore store = ServerFixture.openStore(storePath)) {
      ServerFixture.buildMlp(store, "mlp:1");
      ImageManifest m = Images.manifest(store, "mlp:1");
      victim = m.allocations().get(0).chunks().get(0).digest();
    }
    PoolTestImages.corrupt(storePath, victim);
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      ContextPool workers = ContextPool.create(pool(storePath, 3));
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
              .addFunction("mlp", new FunctionOptions().setImage("mlp:1")), store,
          new PoolInstances(workers, store, storePath, driver.devices(), Duration.ofSeconds(60),
              Duration.ofSeconds(1)))) {
        int port = server.port();
        HttpResponse<String> first = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
        assertEquals(500, first.statusCode(), first.body());
        assertEquals("image_damaged", json(first).path("code").asText(), first.body());
        String hex = victim.toString().substring(victim.toString().indexOf(':') + 1, 20);
        assertTrue(first.body().contains("mlp:1") && first.body().contains(hex), first.body());
        // The worker that found the damage is gone; the pool refills its idle workers once, then starts none.
        for (int i = 0; i < 600 && (workers.stats().get(0).starting() > 0 || workers.stats().get(0).idle() < 2); i++) {
          Thread.sleep(50);
        }
        long started = workers.stats().get(0).started();
        for (int i = 0; i < 5; i++) {
          HttpResponse<String> again = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
          assertEquals(500, again.statusCode(), again.body());
          assertEquals("image_damaged", json(again).path("code").asText(), again.body());
        }
        Thread.sleep(500);
        assertEquals(started, workers.stats().get(0).started(), "no worker was started for the refused requests");
      }
    }
  }

  private static void register(int port, String name, String image) throws Exception {
    HttpResponse<String> put = ServerFixture.send(ServerFixture.request(port, "/v1/functions/" + name)
        .header("Authorization", "Bearer " + TOKEN).header("Content-Type", "application/json")
        .PUT(HttpRequest.BodyPublishers.ofString("{\"image\": \"" + image + "\", \"keepAlive\": \"60s\"}"))
        .build());
    assertTrue(put.statusCode() / 100 == 2, put.body());
  }

  /** Kills the worker of every idle instance of every function; returns how many. */
  private static int killIdleWorkers(int port) throws Exception {
    int killed = 0;
    for (JsonNode f : json(get(port, "/v1/functions")).path("functions")) {
      JsonNode s = json(get(port, "/v1/functions/" + f.path("name").asText()));
      for (JsonNode i : s.path("instances")) {
        Matcher m = PID.matcher(i.path("runs").asText());
        if (i.path("state").asText().equals("idle") && m.find()) {
          ProcessHandle.of(Long.parseLong(m.group(1))).ifPresent(ProcessHandle::destroyForcibly);
          killed++;
        }
      }
    }
    // The instances leave as their workers' pipes close.
    for (int i = 0; i < 3000 && anyInstance(port); i++) {
      Thread.sleep(10);
    }
    return killed;
  }

  private static boolean anyInstance(int port) throws Exception {
    for (JsonNode f : json(get(port, "/v1/functions")).path("functions")) {
      if (!json(get(port, "/v1/functions/" + f.path("name").asText())).path("instances").isEmpty()) {
        return true;
      }
    }
    return false;
  }

  private static long pid(JsonNode status) {
    Matcher m = PID.matcher(status.path("instances").get(0).path("runs").asText());
    assertTrue(m.find(), status.toString());
    return Long.parseLong(m.group(1));
  }
}
