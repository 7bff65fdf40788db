package dev.thaw.server;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.examples.probe.MemoryProbeFunction;
import dev.thaw.image.Images;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import dev.thaw.server.impl.PoolInstances;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.UnaryOperator;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * What a user sees when a function writes the weights its image calls read-only, on the sim device with real worker
 * processes, the real store, the host cache, the HBM tier and a real server on loopback. The memory probe's
 * {@code values} (2 MiB, a page of their own) are read-only by its profile; a {@code fill} request stores into them.
 *
 * <ul>
 *   <li>In a worker whose restore made the slab (fresh memory, write-protected once its copies landed): the store
 *       faults, the request gets the 502 {@code device_fault}, the worker is replaced, and it hands nothing to the
 *       HBM tier. A store into {@code out} (read-write) and reads are served as before.
 *   <li>In a worker that mapped the slab from the HBM tier: the store faults just the same, and the next worker that
 *       maps the tier's copy reads the image's bytes exactly where the store aimed. A healthy worker that retires
 *       hands its weights to the tier and is recycled without touching them (the reads from the tier check that).
 * </ul>
 */
class ReadOnlyWeightsTest {

  static final int ELEMENTS = 1 << 19;
  static final String CONFIG = "{\"elements\": " + ELEMENTS + ", \"maxCount\": 16}";
  static final String READ = "{\"offset\": 1000, \"count\": 4}";
  static final String WRITE_WEIGHTS = "{\"offset\": 1000, \"count\": 4, \"fill\": -7.5}";
  static final String WRITE_OUT = "{\"offset\": " + ELEMENTS + ", \"count\": 4, \"fill\": 3.25}";
  static final Pattern PID = Pattern.compile("worker pid ([0-9]+)");
  static final Pattern IN_USE = Pattern.compile("(?m)^thaw_pool_workers\\{[^}]*state=\"in_use\"[^}]*\\} ([0-9.eE+-]+)");
  static final String INVOKE = "/v1/functions/probe/invoke";

  @TempDir
  Path dir;

  private CapturedStderr log;

  @BeforeEach
  void captureLog() {
    log = new CapturedStderr();
  }

  @AfterEach
  void restoreLog() {
    log.close();
  }

  @Test
  void aWriteToReadOnlyWeightsFailsItsRequestAndLeavesTheSharedWeightsAsTheImageHasThem() throws Exception {
    // Each BECOME answers once every byte is on the device, and the worker protects at once after an answer
    // (protectAfterIdle 0; by default it waits for 20 ms of idleness): the stores below meet the protection, whatever
    // the machine's speed (SlabProtectionWorkerTest pins when a worker protects).
    serve(pool -> pool.setAwaitResident(true).setProtectAfterIdle(Duration.ZERO), (port, server) -> {
      // A worker with the slab it restored itself.
      HttpResponse<String> first = postJson(port, INVOKE, READ);
      assertValues(first, 1000, 1001, 1002, 1003);
      assertTrue(timing(first).contains("tier;desc=\"host-cache\""), timing(first));
      long restored = pid(port);
      assertValues(postJson(port, INVOKE, WRITE_OUT), 3.25, 3.25, 3.25, 3.25);
      assertFaults(postJson(port, INVOKE, WRITE_WEIGHTS));
      awaitExit(restored);
      assertEquals(0, hbmBytes(port), "a worker that faulted hands nothing to the HBM tier");

      HttpResponse<String> replaced = postJson(port, INVOKE, READ);
      assertValues(replaced, 1000, 1001, 1002, 1003);
      assertEquals("cold", replaced.headers().firstValue("Thaw-Start").orElseThrow());
      long second = pid(port);
      assertNotEquals(restored, second);

      // Registered again: the healthy instance retires and leaves its protected weights on the device.
      reregister(port, server);
      awaitReleased(port, second);
      ServerFixture.awaitState(port, "probe", s -> s.path("image").path("hbmBytes").path("0").asLong() >= 2 << 20);

      // A worker that maps the tier's copy read-only: the store faults there too.
      assertFaults(postJson(port, INVOKE, WRITE_WEIGHTS));
      HttpResponse<String> fromTier = postJson(port, INVOKE, READ);
      assertTrue(timing(fromTier).contains("tier;desc=\"hbm\""), timing(fromTier));
      assertValues(fromTier, 1000, 1001, 1002, 1003);
      assertValues(postJson(port, INVOKE, WRITE_OUT), 3.25, 3.25, 3.25, 3.25);
      System.out.printf("read-only weights (sim device): a fill into them got 502 device_fault from a restored "
          + "slab and from the HBM tier's; the tier's copy still reads %s%n", json(fromTier).get("values"));
    });
  }

  /**
   * On demand, the first request runs while the weights stream in, and a worker protects them only once idle after
   * it: a store into them in that request lands (the worker serves on). That worker's slab never reaches the HBM
   * tier; a worker whose requests only read its weights hands them on as before. Copies are slowed (the sim device's
   * bandwidth model) so that the first request is queued well before the weights are on the device.
   */
  @Test
  void aWriteBeforeTheWeightsAreProtectedKeepsThemOutOfTheHbmTier() throws Exception {
    serve(pool -> pool.setEnvironment(Map.of("THAW_DEVICE", "sim", "THAW_SIM_DEVICES", "1",
        "THAW_SIM_COPY_GBPS", "0.04")).setProtectAfterIdle(Duration.ZERO), (port, server) -> {
      // Lands: no protection comes under a running request. This worker's values are -7.5 there now; it serves on
      // (now protected: a second store faults), but must not hand them on.
      HttpResponse<String> early = postJson(port, INVOKE, WRITE_WEIGHTS);
      assertValues(early, -7.5, -7.5, -7.5, -7.5);
      long writer = pid(port);
      assertFaults(postJson(port, INVOKE, WRITE_WEIGHTS));
      awaitExit(writer);
      assertEquals(0, hbmBytes(port), "a slab written before its protection is not kept: " + early.body());
      // And a worker that wrote its weights in the window and then retires healthy keeps them out of the tier too.
      assertValues(postJson(port, INVOKE, WRITE_WEIGHTS), -7.5, -7.5, -7.5, -7.5);
      long healthy = pid(port);
      reregister(port, server);
      awaitReleased(port, healthy);
      assertEquals(0, hbmBytes(port), "a slab written before its protection is not kept");

      HttpResponse<String> fresh = postJson(port, INVOKE, READ);
      assertValues(fresh, 1000, 1001, 1002, 1003);
      assertTrue(timing(fresh).contains("tier;desc=\"host-cache\""), timing(fresh));
      long reader = pid(port);
      reregister(port, server);
      awaitReleased(port, reader);
      ServerFixture.awaitState(port, "probe", s -> s.path("image").path("hbmBytes").path("0").asLong() >= 2 << 20);
      HttpResponse<String> fromTier = postJson(port, INVOKE, READ);
      assertTrue(timing(fromTier).contains("tier;desc=\"hbm\""), timing(fromTier));
      assertValues(fromTier, 1000, 1001, 1002, 1003);
      System.out.printf("a store into the weights before their protection (sim device): %d %s; the HBM tier took "
          + "nothing from that worker, then the weights of a worker that only read them%n", early.statusCode(),
          early.body());
    });
  }

  /**
   * In process (one context per instance, in the server's process): the first request runs in the restore window, so
   * the slab is writable then; the instance protects it before its next request (its last request's work done, every
   * copy landed: the first request's kernel waited for them), never under a request. A store into the weights then
   * faults: the 502 {@code device_fault} of an in-process fault.
   */
  @Test
  void inProcessTheWeightsAreProtectedBetweenRequests() throws Exception {
    Path storePath = dir.resolve("store");
    try (RocksChunkStore store = ServerFixture.openStore(storePath); SimDriver driver = SimDriver.open(new SimOptions())) {
      ServerFixture.build(store, "probe:1", MemoryProbeFunction.class.getName(), CONFIG, READ, 0);
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
              .addFunction("probe", new FunctionOptions().setImage("probe:1")),
          store, new InProcessInstances(driver, store))) {
        int port = server.port();
        HttpResponse<String> first = postJson(port, INVOKE, READ);
        assertValues(first, 1000, 1001, 1002, 1003);
        assertEquals("cold", first.headers().firstValue("Thaw-Start").orElseThrow());
        assertValues(postJson(port, INVOKE, WRITE_OUT), 3.25, 3.25, 3.25, 3.25);
        assertFaults(postJson(port, INVOKE, WRITE_WEIGHTS));
      }
    }
  }

  /** A trial against the server: its port and the server. */
  @FunctionalInterface
  private interface Trial {
    void run(int port, ThawServer server) throws Exception;
  }

  /**
   * Builds the probe's image into a real store, serves it from a pool-backed server on loopback (sim-device worker
   * processes as {@code pool} sets them up, a host cache and an HBM tier), runs {@code trial} once the image is cached
   * and the server ready, and checks that every worker is gone with the server.
   */
  private void serve(UnaryOperator<ContextPoolOptions> pool, Trial trial)
      throws Exception {
    Path storePath = dir.resolve("store");
    try (RocksChunkStore store = ServerFixture.openStore(storePath)) {
      ServerFixture.build(store, "probe:1", MemoryProbeFunction.class.getName(), CONFIG, READ, 0);
      assertEquals(Set.of("values"), Images.manifest(store, "probe:1").readOnlyAllocations());
    }
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(32 << 20));
      ContextPool workers = ContextPool.create(pool.apply(ServerFixture.simPool(storePath, cache.path(), List.of(0))));
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
              .addFunction("probe", new FunctionOptions().setImage("probe:1")),
          store, new PoolInstances(workers, cache, 64L << 20, store, storePath, driver.devices(),
              Duration.ofSeconds(60), Duration.ofSeconds(1)))) {
        int port = server.port();
        ServerFixture.awaitState(port, "probe", s -> s.path("image").path("hostCache").asText().equals("cached"));
        ServerFixture.awaitReady(port);
        trial.run(port, server);
      }
      assertTrue(workers.pids().isEmpty(), "every worker gone with the server");
    }
  }

  /** Registers the probe again: its idle instance retires (handing its weights to the HBM tier if it may). */
  private static void reregister(int port, ThawServer server) throws Exception {
    HttpResponse<String> put = ServerFixture.send(ServerFixture.request(port, "/v1/functions/probe")
        .header("Authorization", "Bearer " + server.adminToken()).header("Content-Type", "application/json")
        .PUT(HttpRequest.BodyPublishers.ofString("{\"image\": \"probe:1\"}")).build());
    assertEquals(200, put.statusCode(), put.body());
  }

  /** A 502 {@code device_fault} naming the CUDA error; the server's log names the kernel under its request id. */
  private void assertFaults(HttpResponse<String> r) throws Exception {
    assertEquals(502, r.statusCode(), r.body());
    JsonNode error = json(r);
    assertEquals("device_fault", error.get("code").asText(), r.body());
    assertTrue(error.get("error").asText().contains("CUDA_ERROR_ILLEGAL_ADDRESS"), r.body());
    String logged = log.errorLogged(error.get("requestId").asText());
    assertTrue(logged.contains("CUDA_ERROR_ILLEGAL_ADDRESS") && logged.contains("probe_write"), logged);
  }

  private static void assertValues(HttpResponse<String> r, double... expected) throws Exception {
    assertEquals(200, r.statusCode(), r.body());
    JsonNode values = json(r).get("values");
    assertEquals(expected.length, values.size(), r.body());
    for (int i = 0; i < expected.length; i++) {
      assertEquals(expected[i], values.get(i).doubleValue(), r.body());
    }
  }

  private static String timing(HttpResponse<String> r) {
    return r.headers().firstValue("Server-Timing").orElse("");
  }

  private static long hbmBytes(int port) throws Exception {
    return json(get(port, "/v1/functions/probe")).path("image").path("hbmBytes").path("0").asLong();
  }

  private static long pid(int port) throws Exception {
    String status = get(port, "/v1/functions/probe").body();
    Matcher m = PID.matcher(status);
    assertTrue(m.find(), status);
    return Long.parseLong(m.group(1));
  }

  /**
   * Waits until the retired instance's worker is done with: it exited, or it was recycled (its image dropped) and is
   * back in the pool, blank. Either way its hand-off to the HBM tier came before.
   */
  private static void awaitReleased(int port, long pid) throws Exception {
    long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
    while (ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false)) {
      Matcher inUse = IN_USE.matcher(get(port, "/metrics").body());
      if (inUse.find() && Double.parseDouble(inUse.group(1)) == 0
          && json(get(port, "/v1/functions/probe")).path("instances").isEmpty()) {
        return;
      }
      assertTrue(System.nanoTime() < deadline, "worker " + pid + " neither exited nor went back to the pool");
      Thread.sleep(10);
    }
  }

  private static void awaitExit(long pid) throws InterruptedException {
    long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
    while (ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false)) {
      assertTrue(System.nanoTime() < deadline, "worker " + pid + " never exited");
      Thread.sleep(10);
    }
  }
}
