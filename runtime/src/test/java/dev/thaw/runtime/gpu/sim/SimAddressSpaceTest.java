package dev.thaw.runtime.gpu.sim;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.gpu.AddressUnavailableException;
import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.CudaOutOfMemoryException;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.Mapping;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.gpu.VirtualRange;
import java.nio.ByteBuffer;
import org.junit.jupiter.api.Test;

/** Pins the deterministic address space, hints, mapping rules and the memory limit. */
class SimAddressSpaceTest {

  private static final long MIB2 = 2L << 20;

  @Test
  void aSecondDriverGetsTheHintedAddressAndATakenHintGivesTheNextFreeRange() {
    long hint = SimAddressSpace.BASE + 64 * MIB2;
    try (SimDriver first = SimDriver.open(new SimOptions()); SimDriver second = SimDriver.open(new SimOptions());
        GpuContext a = first.createContext(0); GpuContext b = second.createContext(0)) {
      VirtualRange ra = a.reserve(4 * MIB2, hint);
      VirtualRange rb = b.reserve(4 * MIB2, hint);
      assertEquals(hint, ra.address());
      assertEquals(hint, rb.address());

      // Taken in the same driver: the next free range after the hint.
      VirtualRange next = a.reserve(MIB2, hint + MIB2);
      assertEquals(hint + 4 * MIB2, next.address());
      assertThrows(AddressUnavailableException.class, () -> a.reserveExact(hint + 2 * MIB2, MIB2));
      assertThrows(IllegalArgumentException.class, () -> a.reserveExact(hint + 4096, MIB2));
      assertThrows(IllegalArgumentException.class, () -> a.reserve(MIB2, hint + 4096));

      // Without a hint: first fit from the base; sizes round up to the granularity.
      VirtualRange any = a.reserve(1, 0);
      assertEquals(SimAddressSpace.BASE, any.address());
      assertEquals(MIB2, any.size());

      ra.close();
      ra.close();
      assertEquals(hint, a.reserveExact(hint, 4 * MIB2).address());
    }
  }

  @Test
  void mappingsMustBeAlignedFitAndNotOverlap() {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      VirtualRange range = ctx.reserve(4 * MIB2, 0);
      PhysicalMemory two = ctx.createMemory(2 * MIB2);
      PhysicalMemory one = ctx.createMemory(1);
      assertEquals(MIB2, one.size());
      assertThrows(IllegalArgumentException.class, () -> range.map(4096, one));
      assertThrows(IllegalArgumentException.class, () -> range.map(3 * MIB2, two));
      Mapping m = range.map(MIB2, two);
      CudaException overlap = assertThrows(CudaException.class, () -> range.map(2 * MIB2, one));
      assertEquals(CudaError.CUDA_ERROR_INVALID_VALUE, overlap.code());

      // Mapped without access: not accessible.
      CudaException noAccess = assertThrows(CudaException.class,
          () -> ctx.copyHostToDevice(range.address() + MIB2, ByteBuffer.allocate(8)));
      assertEquals(CudaError.CUDA_ERROR_INVALID_VALUE, noAccess.code());
      m.setAccess(MemoryAccess.READ_WRITE);
      ctx.copyHostToDevice(range.address() + MIB2, ByteBuffer.allocate(8));
      // Not mapped at all.
      assertThrows(CudaException.class, () -> ctx.copyHostToDevice(range.address(), ByteBuffer.allocate(8)));

      // Two mappings contiguous in one range: a copy may span them.
      Mapping m2 = range.map(0, one);
      m2.setAccess(MemoryAccess.READ_WRITE);
      ByteBuffer across = ByteBuffer.allocate(16);
      for (int i = 0; i < 16; i++) {
        across.put(i, (byte) (i + 1));
      }
      ctx.copyHostToDevice(range.address() + MIB2 - 8, across);
      ByteBuffer back = ByteBuffer.allocate(16);
      ctx.copyDeviceToHost(back, range.address() + MIB2 - 8);
      assertEquals(across, back);
      range.close();
      two.close();
      one.close();
    }
  }

  @Test
  void outOfMemoryLeavesTheContextUsableAndCloseFreesEverything() {
    try (SimDriver driver = SimDriver.open(new SimOptions().setMemoryBytes(8 * MIB2))) {
      GpuContext ctx = driver.createContext(0);
      DeviceBuffer big = ctx.allocate(6 * MIB2);
      CudaOutOfMemoryException oom = assertThrows(CudaOutOfMemoryException.class, () -> ctx.allocate(4 * MIB2));
      assertEquals(CudaError.CUDA_ERROR_OUT_OF_MEMORY, oom.code());
      assertEquals("cuMemCreate", oom.call());
      assertEquals(6 * MIB2, driver.memoryInUse());

      DeviceBuffer small = ctx.allocate(MIB2);
      ctx.memsetD8(small.address(), (byte) 1, 16);
      ctx.synchronize();
      big.close();
      assertEquals(MIB2, driver.memoryInUse());
      ctx.allocate(7 * MIB2);
      assertEquals(8 * MIB2, driver.memoryInUse());
      assertThrows(CudaOutOfMemoryException.class, () -> ctx.createMemory(1));

      ctx.close();
      assertEquals(0, driver.memoryInUse());
      assertThrows(IllegalStateException.class, () -> ctx.allocate(1));
    }
  }

  @Test
  void physicalMemoryLivesUntilClosedAndUnmapped() {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      VirtualRange range = ctx.reserve(MIB2, 0);
      PhysicalMemory mem = ctx.createMemory(MIB2);
      Mapping m = range.map(0, mem);
      m.setAccess(MemoryAccess.READ_WRITE);
      mem.close();
      assertEquals(MIB2, driver.memoryInUse());
      ctx.memsetD8(range.address(), (byte) 7, MIB2);
      m.close();
      m.close();
      assertEquals(0, driver.memoryInUse());
      assertTrue(assertThrows(CudaException.class, () -> ctx.memsetD8(range.address(), (byte) 7, 1))
          .getMessage().contains("not mapped"));
    }
  }
}
