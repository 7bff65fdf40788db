package dev.thaw.server;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPool;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import dev.thaw.server.spi.InstanceFactory;
import dev.thaw.server.impl.PoolInstances;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Shortly before a long warm invoke's predicted end, the event loop that answers it stops sleeping and polls for
 * the answer ({@link ServerOptions#setWakeAhead}); {@code thaw_wake_ahead_total} counts those whose answer came while
 * it polled ({@code caught}) and those that gave up ({@code missed}). Short invokes, the cold one, and a server
 * without wake-ahead never poll. In process and pool-backed (whose worker also says NEAR), on the sim device, the
 * real store and a real server on loopback; the margins are wide (a 150 ms invoke, woken 50 ms ahead, polled for up to
 * 150 ms) so that a busy machine still shows it.
 */
class WakeAheadTest {

  private static final String WAIT = "dev.thaw.examples.wait.WaitFunction";
  private static final String LONG = "{\"micros\": 150000}";

  @TempDir static Path dir;

  @BeforeAll
  static void build() throws Exception {
    try (RocksChunkStore store = ServerFixture.openStore(dir.resolve("store"))) {
      // Above the MLP's addresses: in one process, images that share an address range evict each other.
      ServerFixture.build(store, "wait:1", WAIT, "{}", "{\"micros\": 0}", 64 << 20);
      ServerFixture.buildMlp(store, "mlp:1");
    }
  }

  @Test
  void inProcessTheEventLoopIsAwakeForALongInvokesAnswer() throws Exception {
    Served s = serve(false, Duration.ofMillis(50));
    assertEquals(0, count(s.shortOnes(), "caught") + count(s.shortOnes(), "missed"), "short invokes are not");
    assertTrue(count(s.all(), "caught") >= 1, s.all());
    assertTrue(count(s.all(), "caught") + count(s.all(), "missed") <= 4,
        "the cold invoke and the first warm one (which teaches the prediction) are not woken ahead: " + s.all());
  }

  @Test
  void pooledTheEventLoopIsAwakeForALongInvokesAnswer() throws Exception {
    Served s = serve(true, Duration.ofMillis(50));
    assertEquals(0, count(s.shortOnes(), "caught") + count(s.shortOnes(), "missed"), "short invokes are not");
    assertTrue(count(s.all(), "caught") >= 1, s.all());
  }

  @Test
  void withoutWakeAheadNothingPolls() throws Exception {
    String metrics = serve(false, Duration.ZERO).all();
    assertEquals(0, count(metrics, "caught") + count(metrics, "missed"), metrics);
  }

  @Test
  void theWakeAheadIsAServerOption() {
    assertEquals(Duration.ofNanos(500_000), new ServerOptions().wakeAhead());
    ServerOptions o = ServerOptions.fromJson(ServerFixture.JSON.createObjectNode().put("wakeAhead", "250us"));
    assertEquals(Duration.ofNanos(250_000), o.wakeAhead());
    assertEquals(o.wakeAhead(), ServerOptions.fromJson(o.toJson()).wakeAhead(), "the JSON form round-trips");
    assertEquals(Duration.ZERO, ServerOptions.fromJson(ServerFixture.JSON.createObjectNode().put("wakeAhead", "0"))
        .wakeAhead());
    Assertions.assertThrows(IllegalArgumentException.class,
        () -> ServerOptions.fromJson(ServerFixture.JSON.createObjectNode().put("wakeAhead", "1s")));
  }

  /** The metrics after the short invokes, and after the long ones too. */
  private record Served(String shortOnes, String all) {}

  /** Five short invokes, then five long ones, on a fresh server. */
  private static Served serve(boolean pooled, Duration wakeAhead) throws Exception {
    Path storePath = dir.resolve("store");
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      InstanceFactory instances = pooled
          ? new PoolInstances(ContextPool.create(ServerFixture.simPool(storePath, null, List.of(0))
              .setWakeAhead(wakeAhead)), store, storePath, driver.devices(), Duration.ofSeconds(60),
              Duration.ofSeconds(1))
          : new InProcessInstances(driver, store);
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0).setWakeAhead(wakeAhead)
              .addFunction("wait", new FunctionOptions().setImage("wait:1"))
              .addFunction("mlp", new FunctionOptions().setImage("mlp:1")),
          store, instances)) {
        int port = server.port();
        for (int i = 0; i < 5; i++) {
          assertEquals(200, postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
        }
        String shortOnes = get(port, "/metrics").body();
        for (int i = 0; i < 5; i++) {
          HttpResponse<String> r = postJson(port, "/v1/functions/wait/invoke", LONG);
          assertEquals(200, r.statusCode(), r.body());
          assertEquals(150000, ServerFixture.json(r).path("micros").asLong(), r.body());
        }
        String metrics = get(port, "/metrics").body();
        assertTrue(metrics.contains("thaw_invocations_total{function=\"wait\",outcome=\"ok\",start=\"warm\"} 4.0"),
            "one cold invoke, then warm ones: " + metrics);
        return new Served(shortOnes, metrics);
      }
    }
  }

  /** {@code thaw_wake_ahead_total}: not per function (docs/design/server.md, "Metrics"). */
  private static double count(String metrics, String outcome) {
    return metrics.lines().filter(l -> l.startsWith("thaw_wake_ahead_total{") && l.contains("outcome=\"" + outcome
            + "\""))
        .mapToDouble(l -> Double.parseDouble(l.substring(l.lastIndexOf(' ') + 1))).sum();
  }
}
