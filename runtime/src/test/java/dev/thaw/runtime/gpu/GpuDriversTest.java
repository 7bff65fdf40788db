package dev.thaw.runtime.gpu;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.gpu.cuda.CudaDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
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
    try (GpuDriver d = GpuDrivers.open(DeviceChoice.SIM, new SimOptions())) {
      assertEquals("sim", d.name());
      assertTrue(d.isSimulated());
    }
  }

  @Test
  void autoTakesTheGpuWhenThereIsOneElseTheSim() {
    boolean gpu = CudaDriver.availability().available();
    try (GpuDriver d = GpuDrivers.open(DeviceChoice.AUTO, new SimOptions())) {
      assertEquals(gpu ? "cuda" : "sim", d.name());
    }
  }

  @Test
  void forcingCudaWithoutAGpuSaysWhy() {
    DriverAvailability cuda = CudaDriver.availability();
    if (cuda.available()) {
      try (GpuDriver d = GpuDrivers.open(DeviceChoice.CUDA, new SimOptions())) {
        assertEquals("cuda", d.name());
      }
    } else {
      GpuUnavailableException e = assertThrows(GpuUnavailableException.class,
          () -> GpuDrivers.open(DeviceChoice.CUDA, new SimOptions()));
      assertTrue(e.getMessage().startsWith("THAW_DEVICE=cuda but no GPU is usable: "), e.getMessage());
      assertTrue(e.getMessage().contains(cuda.unavailabilityCause()));
    }
  }
}
