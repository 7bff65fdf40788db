package dev.thaw.server;

import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPool;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.PoolInstances;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A worker's failure as a client sees it, pool-backed on the sim device: a reason, the worker's error kind and the
 * request's id, never the worker's output (what the function printed reaches its stderr, whose end the pool quotes),
 * its pid or a path; the full message is in the server's log under the same id, and the worker's output in the pool's
 * log under the worker's pid.
 */
class WorkerErrorBodiesTest {

  private static final String SECRET = "printed-by-the-function /home/someone/.cache/secret";

  @TempDir
  Path dir;

  @Test
  void aFailedOrLostWorkerAnswersWithAReasonAndARequestIdAndLogsTheRest() throws Exception {
    Path storePath = dir.resolve("store");
    try (RocksChunkStore store = ServerFixture.openStore(storePath)) {
      ServerFixture.build(store, "gate:1", GateFunction.class.getName(), "{}", null, 0);
    }
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        SimDriver driver = SimDriver.open(new SimOptions());
        CapturedStderr log = new CapturedStderr()) {
      ContextPool pool = ContextPool.create(ServerFixture.simPool(storePath, null, List.of(0)));
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
              .addFunction("gate", new FunctionOptions().setImage("gate:1")),
          store, new PoolInstances(pool, store, storePath, driver.devices(), Duration.ofSeconds(60),
              Duration.ofSeconds(1)))) {
        int port = server.port();
        assertEquals(200, postJson(port, "/v1/functions/gate/invoke", "{}").statusCode());

        HttpResponse<String> refused = postJson(port, "/v1/functions/gate/invoke", "{\"bad\": 1}");
        assertEquals(400, refused.statusCode(), refused.body());
        assertEquals("'bad' is refused", json(refused).get("error").asText(), "a refusal says what is wrong, no more");

        HttpResponse<String> failed = postJson(port, "/v1/functions/gate/invoke",
            "{\"print\": \"" + SECRET + "\", \"fail\": true}");
        assertEquals(500, failed.statusCode(), failed.body());
        JsonNode f = assertSafe(failed, "internal_error", "function");
        assertEquals("the function failed", f.get("error").asText());
        assertTrue(log.await(f.get("requestId").asText()).contains("a simulated device fault"),
            "the log has the detail under the request's id:\n" + log.text());

        HttpResponse<String> lost = postJson(port, "/v1/functions/gate/invoke",
            "{\"print\": \"" + SECRET + "\", \"halt\": 3}");
        assertEquals(502, lost.statusCode(), lost.body());
        JsonNode l = assertSafe(lost, "instance_lost", "crashed");
        String id = l.get("requestId").asText();
        String logged = log.await("request " + id + " POST /v1/functions/gate/invoke: 502 instance_lost");
        String line = logged.substring(logged.indexOf("request " + id + " POST"));
        Matcher pid = Pattern.compile("worker ([0-9]+)").matcher(line);
        assertTrue(line.contains("exit status 3") && pid.find(),
            "the log has the worker's end and its pid under the request's id:\n" + line);
        // The worker's own output is logged once, by the pool, under that pid.
        String poolLog = log.await("Worker " + pid.group(1) + " on device 0 lost");
        String poolLine = poolLog.substring(poolLog.indexOf("Worker " + pid.group(1) + " on device 0 lost"));
        assertTrue(poolLine.contains(SECRET), "the pool logs the worker's output with its pid:\n" + poolLine);

        HttpResponse<String> next = postJson(port, "/v1/functions/gate/invoke", "{}");
        assertEquals(200, next.statusCode(), next.body());
      }
    }
  }

  /** The body names its code, kind and request id (the one in the header), and nothing of the worker. */
  private static JsonNode assertSafe(HttpResponse<String> r, String code, String kind) throws Exception {
    JsonNode body = json(r);
    assertEquals(code, body.get("code").asText(), r.body());
    assertEquals(kind, body.get("kind").asText(), r.body());
    assertEquals(r.headers().firstValue("Thaw-Request-Id").orElseThrow(), body.get("requestId").asText());
    for (String leak : List.of("printed-by", "/home", "secret", "stderr", "pid", "Exception")) {
      assertFalse(r.body().contains(leak), "'" + leak + "' in " + r.body());
    }
    assertFalse(r.body().matches("(?s).*worker [0-9].*"), "a worker's pid in " + r.body());
    return body;
  }
}
