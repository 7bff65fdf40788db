package dev.thaw.runtime.gpu;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.gpu.cuda.CudaDriver;
import java.util.Map;
import org.junit.jupiter.api.Test;

class GpuDriversTest {

  @Test
  void parsesTheDeviceChoice() {
    assertEquals(DeviceChoice.AUTO, DeviceChoice.parse(null));
    assertEquals(DeviceChoice.AUTO, DeviceChoice.parse(" "));
    assertEquals(DeviceChoice.CUDA, DeviceChoice.parse("CUDA"));
    assertEquals(DeviceChoice.SIM, DeviceChoice.parse(" sim "));
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> DeviceChoice.parse("tpu"));
    assertTrue(e.getMessage().contains("THAW_DEVICE=tpu"), e.getMessage());
  }

  @Test
  void simIsAlwaysThere() {
    try (GpuDriver d = GpuDrivers.open(DeviceChoice.SIM, Map.of())) {
      assertEquals("sim", d.name());
      assertTrue(d.isSimulated());
    }
  }

  @Test
  void theSimulatedDeviceTakesItsSettingsFromTheEnvironmentItIsGiven() {
    try (GpuDriver d = GpuDrivers.open(DeviceChoice.SIM, Map.of("THAW_SIM_MEMORY", "512m", "THAW_SIM_DEVICES", "2"))) {
      assertEquals(2, d.devices().size());
      assertEquals(512L << 20, d.devices().get(0).totalMemoryBytes());
    }
    assertThrows(IllegalArgumentException.class,
        () -> GpuDrivers.open(DeviceChoice.SIM, Map.of("THAW_SIM_MEMORY", "lots")));
  }

  @Test
  void autoTakesTheGpuWhenThereIsOneElseTheSim() {
    boolean gpu = CudaDriver.availability().available();
    try (GpuDriver d = GpuDrivers.open(DeviceChoice.AUTO, Map.of())) {
      assertEquals(gpu ? "cuda" : "sim", d.name());
    }
  }

  @Test
  void forcingCudaWithoutAGpuSaysWhy() {
    DriverAvailability cuda = CudaDriver.availability();
    if (cuda.available()) {
      try (GpuDriver d = GpuDrivers.open(DeviceChoice.CUDA, Map.of())) {
        assertEquals("cuda", d.name());
      }
    } else {
      GpuUnavailableException e = assertThrows(GpuUnavailableException.class,
          () -> GpuDrivers.open(DeviceChoice.CUDA, Map.of()));
      assertTrue(e.getMessage().startsWith("THAW_DEVICE=cuda but no GPU is usable: "), e.getMessage());
      assertTrue(e.getMessage().contains(cuda.unavailabilityCause()));
    }
  }
}
