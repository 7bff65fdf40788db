package dev.thaw.server;

import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
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
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Several devices: new instances go to the device with the most free budget, and no device takes more than its
 * budget. The host here is two simulated devices, each instance on a sim driver of its own (its own address
 * space, as a worker process has).
 */
class PlacementTest {

  @TempDir
  Path dir;

  /** Two simulated devices: ordinals 0 and 1, each instance restored on a fresh sim driver of its own. */
  static final class TwoSimDevices implements InstanceFactory {
    final InProcessInstances instances;
    final List<DeviceInfo> devices;

    TwoSimDevices(SimDriver driver, RocksChunkStore store) {
      this.instances = InProcessInstances.isolated(driver, store, () -> SimDriver.open(new SimOptions()));
      DeviceInfo d = driver.devices().get(0);
      this.devices = List.of(d, new DeviceInfo(1, d.name(), d.computeCapabilityMajor(), d.computeCapabilityMinor(),
          d.totalMemoryBytes(), d.uuid().replace("0000-4000", "0001-4000"), d.multiprocessorCount()));
    }

    @Override
    public String name() {
      return "two-sim-devices";
    }

    @Override
    public List<DeviceInfo> devices() {
      return devices;
    }

    @Override
    public boolean sharedAddressSpace() {
      return false;
    }

    @Override
    public FunctionInstance startBlocking(String tag, ImageManifest manifest, int device) throws Exception {
      return instances.startBlocking(tag, manifest, 0);
    }

    @Override
    public void close() {
      instances.close();
    }
  }

  @Test
  void instancesSpreadOverDevicesByFreeBudgetAndNoDeviceTakesMoreThanItsBudget() throws Exception {
    try (RocksChunkStore store = ServerFixture.openStore(dir.resolve("store"));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      ServerFixture.build(store, "gate:1", GateFunction.class.getName(), "{}", null, 0);
      // The gate holds one 2 MiB allocation: a 5 MiB budget fits two instances per device.
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0).setGpuMemoryBytes(5L << 20)
          .addFunction("gate", new FunctionOptions().setImage("gate:1").setMaxInstances(8)), store,
          new TwoSimDevices(driver, store))) {
        int port = server.port();
        List<CompletableFuture<HttpResponse<String>>> held = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
          held.add(ServerFixture.background(() -> postJson(port, "/v1/functions/gate/invoke", "{\"hold\": true}")));
        }
        ThawServerTest.awaitWaiting(4);
        SchedulerTest.awaitQueued(port, "gate", 1);
        Map<Integer, Integer> perDevice = new TreeMap<>();
        for (JsonNode i : json(get(port, "/v1/functions/gate")).get("instances")) {
          perDevice.merge(i.get("device").asInt(), 1, Integer::sum);
        }
        assertEquals(Map.of(0, 2, 1, 2), perDevice, "two per device; the fifth request waits for one");
        String metrics = get(port, "/metrics").body();
        for (int d = 0; d < 2; d++) {
          assertEquals(true, metrics.contains("thaw_gpu_memory_reserved_bytes{device=\"" + d + "\"} 4194304.0"),
              "4 MiB reserved on device " + d);
        }
        GateFunction.GATE.release(5);
        for (CompletableFuture<HttpResponse<String>> f : held) {
          assertEquals(200, f.get(30, TimeUnit.SECONDS).statusCode());
        }
      } finally {
        GateFunction.GATE.drainPermits();
      }
    }
  }

  @Test
  void invokeEndpointsCanHaveTheirOwnPortWithoutTheAdminApi() throws Exception {
    try (RocksChunkStore store = ServerFixture.openStore(dir.resolve("store"));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      ServerFixture.buildMlp(store, "mlp:1");
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0).setInvokePort(0)
          .addFunction("mlp", new FunctionOptions().setImage("mlp:1")), store, new InProcessInstances(driver, store))) {
        int invoke = server.invokePort();
        assertEquals(200, postJson(invoke, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
        assertEquals(200, get(invoke, "/v2/health/ready").statusCode());
        assertEquals(404, get(invoke, "/v1/functions").statusCode(), "no admin API on the invoke port");
        assertEquals(404, get(invoke, "/metrics").statusCode());
        assertEquals(404, postJson(server.port(), "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode(),
            "no invoke on the admin port");
        assertEquals(200, get(server.port(), "/v1/functions/mlp").statusCode());
        assertEquals(200, get(server.port(), "/metrics").statusCode());
      }
    }
  }
}
