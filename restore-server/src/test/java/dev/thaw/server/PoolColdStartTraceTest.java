package dev.thaw.server;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.Images;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPool;
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
 * A pool-backed cold start's trace, on the sim device with a real worker process, the real store and a real server on
 * loopback: {@code /trace} holds, under the cold start, the worker's BECOME phases and the restore's copies, placed
 * on the server's clock inside the start they belong to, as valid Chrome trace JSON.
 */
class PoolColdStartTraceTest {

  @TempDir
  Path dir;

  @Test
  void aPoolBackedColdStartShowsTheWorkersBecomeAndCopiesInsideItsStart() throws Exception {
    Path storePath = dir.resolve("store");
    try (RocksChunkStore store = ServerFixture.openStore(storePath)) {
      ServerFixture.buildMlp(store, "mlp:1");
    }
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      ImageManifest manifest = Images.manifest(store, "mlp:1");
      HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(16 << 20));
      ContextPool pool = ContextPool.create(ServerFixture.simPool(storePath, cache.path(), List.of(0)));
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
              .addFunction("mlp", new FunctionOptions().setImage("mlp:1")),
          store, new PoolInstances(pool, cache, store, storePath, driver.devices(), Duration.ofSeconds(60),
              Duration.ofSeconds(1)))) {
        int port = server.port();
        ServerFixture.awaitState(port, "mlp", s -> s.path("image").path("hostCache").asText().equals("cached"));
        ServerFixture.awaitReady(port);
        HttpResponse<String> cold = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
        assertEquals(200, cold.statusCode(), cold.body());
        assertEquals("cold", cold.headers().firstValue("Thaw-Start").orElseThrow());

        ColdStartTrace t = ColdStartTrace.awaitWorkerRows(port, "mlp", 1);
        assertEquals("mlp cold start #1 on device 0", t.title());
        List<String> become = t.becomeRow();
        assertEquals("BECOME mlp:1", become.get(0), become.toString());
        // The BECOME's phases as the worker reported them ("manifest", or "prepared" for an image the idle worker
        // prepared ahead), end to end inside the BECOME's own span.
        assertTrue(become.containsAll(List.of("placement", "load modules", "map allocations", "start restore")),
            "the worker's phases: " + become);
        JsonNode whole = t.span(10, "BECOME mlp:1");
        double at = whole.get("ts").asDouble();
        for (JsonNode phase : t.spans(10).subList(1, become.size())) {
          assertEquals(at, phase.get("ts").asDouble(), 0.01, "each phase starts where the one before it ended");
          at += phase.get("dur").asDouble();
        }
        assertTrue(at <= whole.get("ts").asDouble() + whole.get("dur").asDouble() + 0.01, "inside the BECOME");
        assertEquals("cache", whole.path("args").path("source").asText());
        assertEquals(manifest.totalBytes(), t.copiedBytes(), "every byte's copy on the restore stream's row");
        assertTrue(t.events().stream().anyMatch(e -> e.path("name").asText().startsWith("resident")),
            "the moment the last byte landed");

        // One clock: the worker's BECOME lies inside the request's wait for its start, before its invoke.
        JsonNode queue = t.span(1, "queue");
        JsonNode invoke = t.span(1, "invoke");
        double becomeStart = whole.get("ts").asDouble();
        double becomeEnd = becomeStart + whole.get("dur").asDouble();
        assertTrue(queue.get("ts").asDouble() <= becomeStart && becomeEnd <= invoke.get("ts").asDouble(),
            "BECOME [" + becomeStart + ", " + becomeEnd + "] µs inside the request's start, from "
                + queue.get("ts") + " to the invoke at " + invoke.get("ts"));

        HttpResponse<String> warm = postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
        assertEquals("warm", warm.headers().firstValue("Thaw-Start").orElseThrow());
        assertEquals(1, ColdStartTrace.read(port, "mlp").size(), "a warm request adds no cold start");
        assertEquals(200, get(port, "/v1/functions/mlp").statusCode());
      }
      assertTrue(pool.pids().isEmpty(), "every worker gone with the server");
    }
  }
}
