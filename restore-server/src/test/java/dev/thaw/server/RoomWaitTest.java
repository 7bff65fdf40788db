package dev.thaw.server;

import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import dev.thaw.server.spi.FunctionInstance;
import dev.thaw.server.spi.InstanceFactory;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A device that holds one instance at a time, busy with one function's request: a request to another function waits
 * for it to finish (the idle instance is then evicted for it) instead of getting 503 — a node in a burst of cold
 * starts queues them, it does not refuse them.
 */
class RoomWaitTest {

  @TempDir
  Path dir;

  /** One simulated device with room for one instance. */
  static final class OneSlot implements InstanceFactory {
    final InProcessInstances instances;

    OneSlot(SimDriver driver, RocksChunkStore store) {
      this.instances = InProcessInstances.isolated(driver, store, () -> SimDriver.open(new SimOptions()));
    }

    @Override
    public String name() {
      return "one-slot";
    }

    @Override
    public List<DeviceInfo> devices() {
      return instances.devices();
    }

    @Override
    public boolean sharedAddressSpace() {
      return false;
    }

    @Override
    public int maxInstances(int device) {
      return 1;
    }

    @Override
    public FunctionInstance startBlocking(String tag, ImageManifest manifest, int device) throws Exception {
      return instances.startBlocking(tag, manifest, device);
    }

    @Override
    public void close() {
      instances.close();
    }
  }

  @Test
  void aRequestWaitsForABusyInstanceToLeaveRoomRatherThanGetting503() throws Exception {
    try (RocksChunkStore store = ServerFixture.openStore(dir.resolve("store"));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      ServerFixture.build(store, "gate:1", GateFunction.class.getName(), "{}", null, 0);
      ServerFixture.buildMlp(store, "mlp:1");
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
              .addFunction("gate", new FunctionOptions().setImage("gate:1"))
              .addFunction("mlp", new FunctionOptions().setImage("mlp:1")),
          store, new OneSlot(driver, store))) {
        int port = server.port();
        CompletableFuture<HttpResponse<String>> held = ServerFixture.background(
            () -> postJson(port, "/v1/functions/gate/invoke", "{\"hold\": true}"));
        for (int i = 0; i < 2000 && GateFunction.WAITING.get() == 0; i++) {
          Thread.sleep(10);
        }
        CompletableFuture<HttpResponse<String>> other = ServerFixture.background(
            () -> postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST));
        Thread.sleep(500);
        assertFalse(other.isDone(), "the MLP's request waits while the gate holds the only slot");
        GateFunction.GATE.release();
        assertEquals(200, held.get(30, TimeUnit.SECONDS).statusCode());
        HttpResponse<String> served = other.get(30, TimeUnit.SECONDS);
        assertEquals(200, served.statusCode(), served.body());
        assertEquals("cold", served.headers().firstValue("Thaw-Start").orElseThrow());
        assertTrue(json(ServerFixture.get(port, "/v1/functions/gate")).path("instances").isEmpty(),
            "the gate's idle instance was evicted for the MLP");
      }
    }
  }
}
