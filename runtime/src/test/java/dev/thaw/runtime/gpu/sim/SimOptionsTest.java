package dev.thaw.runtime.gpu.sim;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

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
  void roundTripsThroughJson() {
    SimOptions o = new SimOptions().memoryBytes(1L << 30).copyGBps(12.5).deviceName("test");
    SimOptions back = SimOptions.fromJson(o.toJson());
    assertEquals(o.toJson(), back.toJson());
    assertThrows(IllegalArgumentException.class, () -> SimOptions.fromJson("{\"memoryBytes\": -5}"));
    assertThrows(IllegalArgumentException.class, () -> SimOptions.fromJson("not json"));
  }
}
