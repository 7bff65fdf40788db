package dev.thaw.server;

import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A server warms its own HTTP path once it listens: a health check and an invoke of a function no one registered,
 * over loopback, answered as any client's would be, and left out of the request log (a client's requests are not).
 */
class HttpWarmupTest {

  @TempDir
  Path dir;

  @Test
  void theServerSendsItselfTwoRequestsOnceItListensAndTheRequestLogLeavesThemOut() throws Exception {
    PrintStream err = System.err;
    ByteArrayOutputStream captured = new ByteArrayOutputStream();
    try (RocksChunkStore store = ServerFixture.openStore(dir.resolve("store"));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      ServerFixture.buildMlp(store, "mlp:1");
      System.setErr(new PrintStream(captured, true, StandardCharsets.UTF_8));
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
              .addFunction("mlp", new FunctionOptions().setImage("mlp:1")),
          store, new InProcessInstances(driver, store))) {
        assertEquals("200 404", server.httpWarmup().get(30, TimeUnit.SECONDS),
            "ready (the function can start), then not found (a name no one registered)");
        assertEquals(404, postJson(server.port(), "/v1/functions/nobody/invoke", "{}").statusCode());
      } finally {
        System.setErr(err);
      }
    }
    String log = captured.toString(StandardCharsets.UTF_8);
    assertTrue(log.contains("POST /v1/functions/nobody/invoke 404"), "a client's request is logged: " + log);
    assertFalse(log.contains("/v1/functions/warmup-") || log.contains("GET /v2/health/ready"),
        "the warm-up's are not: " + log);
  }
}
