package dev.thaw.runtime.gpu.sim;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.GpuContext;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class SimOptionsTest {

  @Test
  void readsSizesAndBandwidthFromTheEnvironment() {
    SimOptions o = SimOptions.fromEnvironment(Map.of("THAW_SIM_MEMORY", "512m", "THAW_SIM_COPY_GBPS", "55.4"));
    assertEquals(512L << 20, o.memoryBytes());
    assertEquals(55.4, o.copyGBps());
    assertEquals(16L << 30, SimOptions.parseBytes("X", "16GiB"));
    assertEquals(1234, SimOptions.parseBytes("X", "1234"));
    assertEquals(SimOptions.DEFAULT_MEMORY_BYTES, SimOptions.fromEnvironment(Map.of()).memoryBytes());
  }

  @Test
  void refusesNonsenseWithTheVariableName() {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> SimOptions.fromEnvironment(Map.of("THAW_SIM_MEMORY", "lots")));
    assertEquals("THAW_SIM_MEMORY=lots is not a size (e.g. 16g, 512m, 1073741824)", e.getMessage());
    assertThrows(IllegalArgumentException.class, () -> SimOptions.fromEnvironment(Map.of("THAW_SIM_COPY_GBPS", "-1")));
    assertThrows(IllegalArgumentException.class, () -> SimOptions.fromEnvironment(Map.of("THAW_SIM_COPY_GBPS", "fast")));
    assertThrows(IllegalArgumentException.class, () -> SimOptions.fromEnvironment(Map.of("THAW_SIM_MEMORY", "0")));
  }

  @Test
  void severalDevicesEachWithItsOrdinalAndUuidContextsOnEach() {
    SimOptions o = SimOptions.fromEnvironment(Map.of("THAW_SIM_DEVICES", "2"));
    assertEquals(2, o.deviceCount());
    assertEquals(1, SimOptions.fromEnvironment(Map.of()).deviceCount());
    assertThrows(IllegalArgumentException.class, () -> SimOptions.fromEnvironment(Map.of("THAW_SIM_DEVICES", "0")));
    assertThrows(IllegalArgumentException.class, () -> SimOptions.fromEnvironment(Map.of("THAW_SIM_DEVICES", "two")));
    try (SimDriver driver = SimDriver.open(o)) {
      List<DeviceInfo> devices = driver.devices();
      assertEquals(List.of(0, 1), devices.stream().map(DeviceInfo::ordinal).toList());
      assertEquals(SimDriver.DEVICE_UUID, devices.get(0).uuid());
      assertNotEquals(devices.get(0).uuid(), devices.get(1).uuid());
      try (GpuContext c = driver.createContext(1)) {
        assertEquals(devices.get(1), c.device());
      }
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> driver.createContext(2));
      assertEquals("no device 2; the simulated devices are 0 to 1 (THAW_SIM_DEVICES)", e.getMessage());
    }
  }

  @Test
  void roundTripsThroughJson() {
    SimOptions o = new SimOptions().setMemoryBytes(1L << 30).setCopyGBps(12.5).setDeviceName("test").setDeviceCount(3)
        .setMultiprocessorCount(2);
    SimOptions back = SimOptions.fromJson(o.toJson());
    assertEquals(o.toJson(), back.toJson());
    assertEquals(3, back.deviceCount());
    assertEquals(2, back.multiprocessorCount());
    try (SimDriver driver = SimDriver.open(back)) {
      assertEquals(2, driver.devices().get(2).multiprocessorCount());
    }
    assertThrows(IllegalArgumentException.class, () -> new SimOptions().setMultiprocessorCount(0));
    assertThrows(IllegalArgumentException.class, () -> SimOptions.fromJson("{\"memoryBytes\": -5}"));
    assertThrows(IllegalArgumentException.class, () -> SimOptions.fromJson("not json"));
  }
}
