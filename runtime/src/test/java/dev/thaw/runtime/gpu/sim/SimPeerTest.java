package dev.thaw.runtime.gpu.sim;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.CudaOutOfMemoryException;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.MemoryAccess;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * What the simulated device models of several devices in one process that the contract cannot ask a GPU without
 * risking a sticky error: a device reaches another's memory only through a mapping that granted it access, only when
 * the devices are peers; memory is counted per device; the peer link's bandwidth model.
 */
class SimPeerTest {

  private static final long MIB = 1L << 20;

  @Test
  void aDeviceNotGrantedAccessCannotCopyFromAnothersMemory() {
    try (SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(2));
        GpuContext zero = driver.createContext(0); GpuContext one = driver.createContext(1);
        DeviceBuffer theirs = one.allocate(MIB); DeviceBuffer mine = zero.allocate(MIB);
        GpuStream stream = zero.createStream()) {
      CudaException e = assertThrows(CudaException.class,
          () -> stream.copyDeviceToDeviceAsync(mine.address(), theirs.address(), MIB));
      assertEquals(CudaError.CUDA_ERROR_INVALID_VALUE, e.code());
      assertTrue(e.getMessage().contains("without access"), e.getMessage());
      // Its own device still uses it; once granted, so does the other.
      one.memsetD32(theirs.address(), 42, 4);
      theirs.setAccessFor(0, MemoryAccess.READ);
      stream.copyDeviceToDeviceAsync(mine.address(), theirs.address(), MIB);
      stream.synchronize();
      ByteBuffer b = ByteBuffer.allocateDirect(16).order(ByteOrder.LITTLE_ENDIAN);
      zero.copyDeviceToHost(b, mine.address());
      assertEquals(42, b.getInt(12));
      // Read access is not write access.
      assertThrows(CudaException.class, () -> zero.memsetD8(theirs.address(), (byte) 1, 16));
    }
  }

  @Test
  void devicesThatAreNotPeersRefuseAGrant() {
    try (SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(2).setPeerAccess(false));
        GpuContext one = driver.createContext(1); DeviceBuffer theirs = one.allocate(MIB)) {
      assertFalse(driver.canAccessPeer(0, 1));
      CudaException e = assertThrows(CudaException.class, () -> theirs.setAccessFor(0, MemoryAccess.READ));
      assertEquals(CudaError.CUDA_ERROR_INVALID_DEVICE, e.code());
    }
  }

  @Test
  void memoryIsCountedPerDevice() {
    try (SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(2).setMemoryBytes(16 * MIB));
        GpuContext zero = driver.createContext(0); GpuContext one = driver.createContext(1);
        DeviceBuffer most = one.allocate(12 * MIB)) {
      assertEquals(4 * MIB, one.memoryInfo().freeBytes());
      assertEquals(16 * MIB, zero.memoryInfo().freeBytes());
      assertThrows(CudaOutOfMemoryException.class, () -> one.allocate(8 * MIB));
      try (DeviceBuffer fits = zero.allocate(8 * MIB)) {
        assertEquals(8 * MIB, zero.memoryInfo().freeBytes());
        assertEquals(20 * MIB, driver.memoryInUse());
        assertEquals(12 * MIB, driver.memoryInUse(1));
      }
    }
  }

  @Test
  void aPeerCopyTakesTheModelledTimeOfThePeerLink() {
    // 0.5 GB/s: 8 MiB take ~17 ms; as fast as the host without the model. Only a lower bound is asserted.
    try (SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(2).setPeerGBps(0.5));
        GpuContext zero = driver.createContext(0); GpuContext one = driver.createContext(1);
        DeviceBuffer theirs = one.allocate(8 * MIB); DeviceBuffer mine = zero.allocate(8 * MIB);
        GpuStream stream = zero.createStream()) {
      theirs.setAccessFor(0, MemoryAccess.READ);
      long t = System.nanoTime();
      stream.copyPeerAsync(mine.address(), zero, theirs.address(), one, 8 * MIB);
      stream.synchronize();
      assertTrue(System.nanoTime() - t >= 8 * MIB / 0.5 * 0.9, "the peer link's time was modelled");
    }
  }

  @Test
  void theEnvironmentSetsThePeerLink() {
    SimOptions o = SimOptions.fromEnvironment(Map.of("THAW_SIM_DEVICES", "2", "THAW_SIM_PEER_GBPS", "393",
        "THAW_SIM_PEER_ACCESS", "0"));
    assertEquals(393.0, o.peerGBps());
    assertFalse(o.peerAccess());
    assertEquals(o.peerGBps(), SimOptions.fromJson(o.toJson()).peerGBps());
    assertFalse(SimOptions.fromJson(o.toJson()).peerAccess());
    assertThrows(IllegalArgumentException.class,
        () -> SimOptions.fromEnvironment(Map.of("THAW_SIM_PEER_ACCESS", "maybe")));
    assertThrows(IllegalArgumentException.class, () -> SimOptions.fromEnvironment(Map.of("THAW_SIM_PEER_GBPS", "-2")));
  }
}
