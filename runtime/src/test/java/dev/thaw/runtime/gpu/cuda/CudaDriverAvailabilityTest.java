package dev.thaw.runtime.gpu.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.GpuUnavailableException;
import org.junit.jupiter.api.Test;

/** Pins that asking whether CUDA is usable never throws, and that the answer is explained or backed by devices. */
class CudaDriverAvailabilityTest {

  @Test
  void availabilityIsExplainedOrBackedByDevices() {
    DriverAvailability a = CudaDriver.availability();
    assertSame(a, CudaDriver.availability(), "the answer is computed once");
    if (!a.available()) {
      assertNotNull(a.unavailabilityCause());
      assertFalse(a.unavailabilityCause().isBlank(), "an unavailable driver says why");
      GpuUnavailableException e = assertThrows(GpuUnavailableException.class, CudaDriver::open);
      assertTrue(e.getMessage().contains(a.unavailabilityCause()), e.getMessage());
      return;
    }
    try (CudaDriver driver = CudaDriver.open()) {
      assertEquals("cuda", driver.name());
      assertFalse(driver.isSimulated());
      assertTrue(driver.driverVersion() >= 13000, "driver version " + driver.driverVersion());
      assertFalse(driver.devices().isEmpty(), "an available driver lists its devices");
      for (DeviceInfo d : driver.devices()) {
        assertFalse(d.name().isBlank());
        assertTrue(d.totalMemoryBytes() > 0);
        assertTrue(d.multiprocessorCount() > 0);
        assertTrue(d.computeCapabilityMajor() > 0);
        assertTrue(d.uuid().matches("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), d.uuid());
      }
    }
  }

  @Test
  void uuidIsFormattedLikeNvidiaSmi() {
    byte[] bytes = new byte[16];
    for (int i = 0; i < 16; i++) {
      bytes[i] = (byte) (0x11 * i);
    }
    assertEquals("GPU-00112233-4455-6677-8899-aabbccddeeff", CudaDriver.formatUuid(bytes));
  }
}
