package dev.thaw.server;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.examples.probe.MemoryProbeFunction;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A sticky device fault with instances in the server's own process (the sim device): CUDA in the process is
 * unusable from then on, so the server must say so and serve nothing rather than fail every request at random. The
 * faulting request gets a 502 naming the fault; liveness and readiness turn 503 (the kubelet restarts the pod); every
 * later request, of this function or another, is a clear 503 {@code device_fault}, and nothing hangs or crashes.
 */
class InProcessFaultTest {

  @TempDir
  Path dir;

  @Test
  void aStickyFaultInProcessFailsLivenessAndEveryLaterRequestClearly() throws Exception {
    try (RocksChunkStore store = ServerFixture.openStore(dir.resolve("store"));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      ServerFixture.buildMlp(store, "mlp:1");
      ServerFixture.build(store, "probe:1", MemoryProbeFunction.class.getName(), FaultIsolationTest.PROBE_CONFIG,
          FaultIsolationTest.PROBE_GOOD, 0);
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
              .addFunction("mlp", new FunctionOptions().setImage("mlp:1"))
              .addFunction("probe", new FunctionOptions().setImage("probe:1")),
          store, new InProcessInstances(driver, store))) {
        int port = server.port();
        assertEquals(200, postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
        HttpResponse<String> good = postJson(port, "/v1/functions/probe/invoke", FaultIsolationTest.PROBE_GOOD);
        assertEquals(200, good.statusCode(), good.body());
        assertEquals(200, get(port, "/v2/health/live").statusCode());
        assertEquals(200, get(port, "/v2/health/ready").statusCode());

        HttpResponse<String> fault = postJson(port, "/v1/functions/probe/invoke", FaultIsolationTest.PROBE_FAULT);
        assertEquals(502, fault.statusCode(), fault.body());
        assertEquals("device_fault", json(fault).get("code").asText(), fault.body());
        assertTrue(json(fault).get("error").asText().contains("CUDA_ERROR_ILLEGAL_ADDRESS"), fault.body());

        HttpResponse<String> live = get(port, "/v2/health/live");
        assertEquals(503, live.statusCode(), live.body());
        JsonNode liveBody = json(live);
        assertFalse(liveBody.get("live").asBoolean());
        assertTrue(liveBody.get("reason").asText().contains("CUDA_ERROR_ILLEGAL_ADDRESS"), live.body());
        assertEquals(503, get(port, "/v2/health/ready").statusCode());

        // The other function's warm instance shares the process: it serves no more, and says why.
        for (String function : new String[] {"mlp", "probe"}) {
          String body = function.equals("mlp") ? ServerFixture.MLP_REQUEST : FaultIsolationTest.PROBE_GOOD;
          HttpResponse<String> after = postJson(port, "/v1/functions/" + function + "/invoke", body);
          assertEquals(503, after.statusCode(), after.body());
          assertEquals("device_fault", json(after).get("code").asText(), after.body());
        }
        // The server itself still answers: metadata, metrics, the function list.
        assertEquals(200, get(port, "/v1/functions").statusCode());
        assertEquals(200, get(port, "/metrics").statusCode());
      }
    }
  }
}
