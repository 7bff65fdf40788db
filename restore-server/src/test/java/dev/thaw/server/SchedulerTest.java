package dev.thaw.server;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The lifecycle through HTTP: a bounded fair queue (429 when full), scale-out to maxInstances and scale-in after
 * keepAlive, placement by memory and by address range (idle instances evicted, 503 + Retry-After when nothing
 * fits), a faulted instance replaced, and drain.
 */
class SchedulerTest {

  @TempDir
  static Path dir;

  static RocksChunkStore store;
  static SimDriver driver;
  ThawServer server;

  @BeforeAll
  static void images() throws Exception {
    store = ServerFixture.openStore(dir.resolve("store"));
    ServerFixture.buildMlp(store, "mlp:1");
    ServerFixture.buildMlp(store, "mlp:same-addresses");
    ServerFixture.build(store, "gate:1", GateFunction.class.getName(), "{}", null, 64L << 20);
    driver = SimDriver.open(new SimOptions());
  }

  @AfterAll
  static void close() {
    driver.close();
    store.close();
  }

  @AfterEach
  void stop() {
    GateFunction.GATE.release(100);
    if (server != null) {
      server.close();
      assertEquals(0, server.instanceCount());
    }
    GateFunction.GATE.drainPermits();
  }

  private int start(ServerOptions o) {
    server = ThawServer.start(o.setPort(0).setAdminToken("t".repeat(32)), store, new InProcessInstances(driver, store));
    return server.port();
  }

  @Test
  void aFullQueueIsRefusedWith429AndQueuedRequestsAreServedInOrder() throws Exception {
    int port = start(new ServerOptions().addFunction("gate",
        new FunctionOptions().setImage("gate:1").setQueueCapacity(2)));
    List<CompletableFuture<HttpResponse<String>>> accepted = new ArrayList<>();
    accepted.add(ServerFixture.background(() -> postJson(port, "/v1/functions/gate/invoke", "{\"hold\": true}")));
    ThawServerTest.awaitWaiting(1);
    for (int i = 0; i < 2; i++) {
      accepted.add(ServerFixture.background(() -> postJson(port, "/v1/functions/gate/invoke", "{}")));
      awaitQueued(port, "gate", i + 1);
    }
    HttpResponse<String> full = postJson(port, "/v1/functions/gate/invoke", "{}");
    assertEquals(429, full.statusCode(), full.body());
    assertEquals("1", full.headers().firstValue("Retry-After").orElseThrow());
    assertEquals("queue_full", json(full).get("code").asText());
    GateFunction.GATE.release();
    for (int i = 0; i < accepted.size(); i++) {
      HttpResponse<String> r = accepted.get(i).get(30, TimeUnit.SECONDS);
      assertEquals(200, r.statusCode(), r.body());
      assertEquals(i + 1, json(r).get("count").asInt(), "served in arrival order, one at a time");
    }
    assertTrue(get(port, "/metrics").body().contains("thaw_rejected_total{function=\"gate\",reason=\"queue_full\"} 1.0"));
  }

  @Test
  void instancesScaleOutToMaxInstancesUnderLoadAndInAfterKeepAlive() throws Exception {
    // Each instance on a sim driver of its own: an address space each, as pooled worker processes have.
    server = ThawServer.start(new ServerOptions().setPort(0).addFunction("gate", new FunctionOptions()
        .setImage("gate:1").setMaxInstances(3).setKeepAlive(Duration.ofMillis(300))), store,
        InProcessInstances.isolated(driver, store, () -> SimDriver.open(new SimOptions())));
    int port = server.port();
    List<CompletableFuture<HttpResponse<String>>> held = new ArrayList<>();
    for (int i = 0; i < 4; i++) {
      held.add(ServerFixture.background(() -> postJson(port, "/v1/functions/gate/invoke", "{\"hold\": true}")));
    }
    ThawServerTest.awaitWaiting(3);
    assertEquals(3, server.instanceCount(), "three instances, the fourth request queued");
    awaitQueued(port, "gate", 1);
    GateFunction.GATE.release(4);
    Set<String> starts = new HashSet<>();
    for (CompletableFuture<HttpResponse<String>> f : held) {
      HttpResponse<String> r = f.get(30, TimeUnit.SECONDS);
      assertEquals(200, r.statusCode(), r.body());
      starts.add(r.headers().firstValue("Thaw-Start").orElseThrow());
    }
    assertEquals(Set.of("cold", "warm"), starts, "three cold starts and one warm");
    for (int i = 0; i < 500 && server.instanceCount() > 0; i++) {
      Thread.sleep(10);
    }
    assertEquals(0, server.instanceCount(), "scaled to zero after keepAlive");
    HttpResponse<String> again = postJson(port, "/v1/functions/gate/invoke", "{}");
    assertEquals("cold", again.headers().firstValue("Thaw-Start").orElseThrow());
  }

  @Test
  void anImageWhoseAddressesAreTakenEvictsTheIdleHolderAndOneThatCannotFitIsRefusedWith503() throws Exception {
    int port = start(new ServerOptions()
        .addFunction("a", new FunctionOptions().setImage("mlp:1"))
        .addFunction("b", new FunctionOptions().setImage("mlp:same-addresses")));
    for (String f : List.of("a", "b", "a")) {
      HttpResponse<String> r = postJson(port, "/v1/functions/" + f + "/invoke", ServerFixture.MLP_REQUEST);
      assertEquals(200, r.statusCode(), r.body());
      assertEquals("cold", r.headers().firstValue("Thaw-Start").orElseThrow(), "the other held its addresses: " + f);
      assertEquals(1, server.instanceCount());
    }
    server.close();

    // A budget smaller than the MLP's six 2 MiB-rounded allocations.
    port = start(new ServerOptions().setGpuMemoryBytes(4L << 20)
        .addFunction("a", new FunctionOptions().setImage("mlp:1")));
    assertEquals(503, get(port, "/v2/models/a/ready").statusCode());
    assertEquals(503, get(port, "/v2/health/ready").statusCode());
    HttpResponse<String> r = postJson(port, "/v1/functions/a/invoke", ServerFixture.MLP_REQUEST);
    assertEquals(503, r.statusCode(), r.body());
    assertEquals("1", r.headers().firstValue("Retry-After").orElseThrow());
    assertEquals("no_capacity", json(r).get("code").asText());
    assertEquals(200, get(port, "/v2/health/live").statusCode(), "refused, never crashed");
  }

  @Test
  void aFaultedInstanceIsEvictedAndTheNextRequestStartsAFreshOne() throws Exception {
    int port = start(new ServerOptions().addFunction("gate", new FunctionOptions().setImage("gate:1")));
    assertEquals(1, json(postJson(port, "/v1/functions/gate/invoke", "{}")).get("count").asInt());
    HttpResponse<String> bad = postJson(port, "/v1/functions/gate/invoke", "{\"bad\": 1}");
    assertEquals(400, bad.statusCode(), "a refused request leaves the instance");
    assertEquals(2, json(postJson(port, "/v1/functions/gate/invoke", "{}")).get("count").asInt());
    HttpResponse<String> fault = postJson(port, "/v1/functions/gate/invoke", "{\"fail\": true}");
    assertEquals(500, fault.statusCode(), fault.body());
    HttpResponse<String> next = postJson(port, "/v1/functions/gate/invoke", "{}");
    assertEquals(200, next.statusCode(), next.body());
    assertEquals("cold", next.headers().firstValue("Thaw-Start").orElseThrow());
    assertEquals(1, json(next).get("count").asInt(), "a fresh instance, restored from the image");
  }

  @Test
  void drainRefusesNewRequestsAndFinishesInFlightOnes() throws Exception {
    int port = start(new ServerOptions().addFunction("gate", new FunctionOptions().setImage("gate:1")));
    CompletableFuture<HttpResponse<String>> held = ServerFixture.background(
        () -> postJson(port, "/v1/functions/gate/invoke", "{\"hold\": true}"));
    ThawServerTest.awaitWaiting(1);
    CompletableFuture<Boolean> drained = ServerFixture.background(() -> server.drain(Duration.ofSeconds(30)));
    for (int i = 0; i < 500 && server.ready(); i++) {
      Thread.sleep(5);
    }
    assertFalse(server.ready());
    assertEquals(503, get(port, "/v2/health/ready").statusCode());
    HttpResponse<String> refused = postJson(port, "/v1/functions/gate/invoke", "{}");
    assertEquals(503, refused.statusCode());
    assertFalse(drained.isDone());
    GateFunction.GATE.release();
    assertEquals(200, held.get(30, TimeUnit.SECONDS).statusCode());
    assertTrue(drained.get(30, TimeUnit.SECONDS));
  }

  static void awaitQueued(int port, String function, int n) throws Exception {
    int queued = -1;
    for (int i = 0; i < 2000; i++) {
      queued = json(get(port, "/v1/functions/" + function)).get("queued").asInt();
      if (queued == n) {
        return;
      }
      Thread.sleep(5);
    }
    assertEquals(n, queued, "requests queued for " + function);
  }
}
