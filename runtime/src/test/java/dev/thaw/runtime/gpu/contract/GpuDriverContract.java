package dev.thaw.runtime.gpu.contract;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.ChildJvm;
import dev.thaw.runtime.gpu.AddressUnavailableException;
import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.CudaOutOfMemoryException;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.DeviceMemoryInfo;
import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.KernelParam;
import dev.thaw.runtime.gpu.Mapping;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.gpu.ParamType;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.gpu.PtxCompileException;
import dev.thaw.runtime.gpu.VirtualRange;
import dev.thaw.runtime.host.ProcessFds;
import dev.thaw.runtime.host.SharedMemory;
import java.nio.ByteBuffer;
import java.nio.ReadOnlyBufferException;
import java.nio.file.Path;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * The behaviour every {@link GpuDriver} must have, run against the simulated device in CI and against CUDA
 * on a GPU host. A subclass opens the driver; everything else is shared, so the two cannot drift apart.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
public abstract class GpuDriverContract {

  static final long MIB = 1L << 20;

  protected GpuDriver driver;
  protected GpuContext ctx;
  private GpuModule module;

  /** Whether the driver under test is usable here; when not, every test is skipped with the reason. */
  protected abstract DriverAvailability availability();

  /** Opens the driver under test; called only when it is available. */
  protected abstract GpuDriver openDriver();

  /** What {@code THAW_DEVICE} names this driver, for the child JVM. */
  protected abstract String deviceChoice();

  @BeforeAll
  void openDriverOnce() {
    if (availability().available()) {
      driver = openDriver();
    }
  }

  @AfterAll
  void closeDriver() {
    if (driver != null) {
      driver.close();
    }
  }

  @BeforeEach
  void createContext() {
    DriverAvailability availability = availability();
    Assumptions.assumeTrue(availability.available(), () -> "driver not usable here: " + availability.unavailabilityCause());
    ctx = driver.createContext(0);
    module = ctx.loadPtx(ContractKernels.ptx());
  }

  @AfterEach
  void closeContext() {
    if (ctx != null) {
      module.close();
      ctx.close();
    }
  }

  // ---- devices and contexts ----

  @Test
  void describesItsDevices() {
    List<DeviceInfo> devices = driver.devices();
    assertFalse(devices.isEmpty());
    DeviceInfo d = devices.get(0);
    assertEquals(0, d.ordinal());
    assertFalse(d.name().isBlank());
    assertTrue(d.computeCapabilityMajor() >= 8, "compute capability " + d.smArch());
    assertTrue(d.totalMemoryBytes() >= 1L << 30, "memory " + d.totalMemoryBytes());
    assertTrue(d.multiprocessorCount() > 0);
    assertTrue(d.uuid().matches("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), d.uuid());
    assertTrue(driver.driverVersion() >= 12000, "driver version " + driver.driverVersion());
    assertEquals(d, ctx.device());
    assertEquals(driver.isSimulated(), driver.name().equals("sim"));
  }

  @Test
  void refusesAnUnknownDeviceOrdinal() {
    int n = driver.devices().size();
    assertThrows(IllegalArgumentException.class, () -> driver.createContext(n));
    assertThrows(IllegalArgumentException.class, () -> driver.createContext(-1));
  }

  @Test
  void contextsAreIndependentAndCloseIdempotently() throws Exception {
    GpuContext other = driver.createContext(0);
    try (DeviceBuffer a = other.allocate(MIB)) {
      other.memsetD32(a.address(), 0x01020304, 4);
      ctx.makeCurrent();
      other.makeCurrent();
      assertEquals(0x01020304, readInts(other, a.address(), 4)[3]);
    }
    other.close();
    other.close();
    assertThrows(IllegalStateException.class, () -> other.allocate(MIB));
    assertThrows(IllegalStateException.class, other::createStream);
    // The first context is untouched by the second's close.
    try (DeviceBuffer b = ctx.allocate(MIB)) {
      ctx.memsetD8(b.address(), (byte) 3, 16);
      assertEquals(0x03030303, readInts(ctx, b.address(), 4)[0]);
    }
  }

  @Test
  void contextWorksFromAnotherThread() throws Exception {
    AtomicReference<Throwable> failure = new AtomicReference<>();
    int[] seen = new int[1];
    Thread t = new Thread(() -> {
      try (DeviceBuffer b = ctx.allocate(MIB)) {
        ctx.memsetD32(b.address(), 77, 8);
        seen[0] = readInts(ctx, b.address(), 8)[7];
      } catch (Throwable e) {
        failure.set(e);
      }
    });
    t.start();
    t.join();
    if (failure.get() != null) {
      throw new AssertionError(failure.get());
    }
    assertEquals(77, seen[0]);
  }

  // ---- virtual memory ----

  @Test
  void granularityIsTwoMebibytes() {
    assertEquals(2 * MIB, ctx.granularity());
  }

  @Test
  void reservesCreatesMapsAndGrantsAccessStepByStep() {
    long g = ctx.granularity();
    try (VirtualRange range = ctx.reserve(4 * g, 0);
        PhysicalMemory first = ctx.createMemory(g);
        PhysicalMemory second = ctx.createMemory(2 * g)) {
      assertEquals(4 * g, range.size());
      assertEquals(0, range.address() % g);
      assertEquals(2 * g, second.size());
      Mapping m1 = range.map(0, first);
      Mapping m2 = range.map(2 * g, second);
      assertEquals(range.address(), m1.address());
      assertEquals(range.address() + 2 * g, m2.address());
      m1.setAccess(MemoryAccess.READ_WRITE);
      m2.setAccess(MemoryAccess.READ_WRITE);
      assertEquals(MemoryAccess.READ_WRITE, m1.access());
      ctx.memsetD32(m1.address(), 11, g / 4);
      ctx.memsetD32(m2.address(), 22, 2 * g / 4);
      ctx.copyDeviceToDevice(m2.address() + g, m1.address(), 1024);
      assertEquals(11, readInts(ctx, m1.address() + g - 4, 1)[0]);
      assertEquals(22, readInts(ctx, m2.address(), 1)[0]);
      assertEquals(11, readInts(ctx, m2.address() + g, 1)[0]);
      m1.close();
      m1.close();
      m2.close();
    }
  }

  @Test
  void scratchRangesComeFromTheTopFarFromWhereImagesLie() {
    try (VirtualRange plain = ctx.reserve(4 * MIB, 0); VirtualRange scratch = ctx.reserveScratch(4 * MIB);
        DeviceBuffer b = ctx.allocateScratch(MIB); VirtualRange after = ctx.reserve(4 * MIB, 0)) {
      assertTrue(scratch.address() - plain.address() >= 1L << 30, String.format("0x%x, 0x%x", plain.address(),
          scratch.address()));
      assertTrue(b.address() > plain.address() && b.address() + b.mappedSize() <= scratch.address()
          || b.address() >= scratch.address() + scratch.size(), "disjoint");
      assertTrue(after.address() < scratch.address(), "ordinary ranges keep coming from the bottom");
      ctx.memsetD32(b.address(), 0x5c, 4);
      assertEquals(0x5c, readInts(ctx, b.address(), 4)[3]);
    }
  }

  @Test
  void refusesMappingsThatDoNotFit() {
    long g = ctx.granularity();
    try (VirtualRange range = ctx.reserve(2 * g, 0); PhysicalMemory mem = ctx.createMemory(2 * g)) {
      assertThrows(IllegalArgumentException.class, () -> range.map(g, mem));
      assertThrows(IllegalArgumentException.class, () -> range.map(g / 2, mem));
      assertThrows(IllegalArgumentException.class, () -> range.map(-g, mem));
    }
    assertThrows(IllegalArgumentException.class, () -> ctx.reserve(0, 0));
    assertThrows(IllegalArgumentException.class, () -> ctx.createMemory(-1));
    assertThrows(IllegalArgumentException.class, () -> ctx.allocate(0));
  }

  @Test
  void honoursAFreeAddressHintAndRefusesATakenExactAddress() {
    long address;
    try (DeviceBuffer first = ctx.allocate(8 * MIB)) {
      address = first.address();
      // Taken: an exact request fails and reserves nothing; a plain hint lands elsewhere.
      AddressUnavailableException e = assertThrows(AddressUnavailableException.class,
          () -> ctx.allocateAt(address, 8 * MIB));
      assertEquals(address, e.address());
      try (VirtualRange elsewhere = ctx.reserve(8 * MIB, address)) {
        assertNotEquals(address, elsewhere.address());
      }
    }
    // Free again: the hint is honoured, exactly.
    try (DeviceBuffer again = ctx.allocateAt(address, 8 * MIB)) {
      assertEquals(address, again.address());
      ctx.memsetD32(again.address(), 9, 2);
      assertEquals(9, readInts(ctx, again.address(), 2)[1]);
    }
    assertThrows(IllegalArgumentException.class, () -> ctx.reserveExact(address + 4096, 2 * MIB));
  }

  @Test
  void aSecondProcessMapsTheSameDeviceAddress() throws Exception {
    try (DeviceBuffer mine = ctx.allocate(4 * MIB)) {
      ChildJvm.Result child = ChildJvm.run(ContractChild.class, deviceChoice(), "map-at", Long.toHexString(mine.address()));
      assertEquals(0, child.exitCode(), child.output());
      assertEquals(Long.toHexString(mine.address()), child.get("address"));
      assertEquals("true", child.get("roundtrip"));
    }
  }

  @Test
  void readOnlyMemoryCanBeReadByKernelsAndCopies() {
    int n = 1 << 16;
    try (DeviceBuffer x = ctx.allocate(4L * n); DeviceBuffer y = ctx.allocate(4L * n); GpuStream s = ctx.createStream()) {
      float[] xs = randomFloats(n, 1);
      float[] ys = randomFloats(n, 2);
      x.copyFromHost(floatsToBuffer(xs));
      y.copyFromHost(floatsToBuffer(ys));
      x.setAccess(MemoryAccess.READ);
      module.kernel(ContractKernels.SAXPY).launch(Dim3.of(64), Dim3.of(256), s, 2.0f, x, y, n);
      s.synchronize();
      assertArrayEquals(saxpy(2.0f, xs, ys), readFloats(ctx, y.address(), n));
      assertArrayEquals(xs, readFloats(ctx, x.address(), n));
    }
  }

  @Test
  void aStoreToReadOnlyMemoryFailsTheLaunch() throws Exception {
    ChildJvm.Result child = ChildJvm.run(ContractChild.class, deviceChoice(), "write-read-only");
    assertEquals(0, child.exitCode(), child.output());
    System.out.println("store to read-only memory: " + child.get("sync"));
    assertNotEquals("ok", child.get("sync"), "a store to read-only memory must not succeed");
  }

  // ---- shared host memory and exported device memory (the pool's memory tiers) ----

  @Test
  void registersSharedHostMemoryForAsynchronousCopies() throws Exception {
    try (SharedMemory shm = SharedMemory.anonymous("contract", 4 * MIB); DeviceBuffer d = ctx.allocate(4 * MIB);
        GpuStream s = ctx.createStream()) {
      shm.slice(0, 4096).putLong(0, 0x1122334455667788L).putLong(4088, 42L);
      PinnedBuffer reg = ctx.registerHost(shm.address(), shm.size(), false);
      assertFalse(reg.isReadOnly());
      assertEquals(shm.address(), reg.address());
      CudaException twice = assertThrows(CudaException.class, () -> ctx.registerHost(shm.address() + 4096, 4096, false));
      assertEquals(CudaError.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, twice.code());
      s.copyHostToDeviceAsync(d.address(), reg, 0, 4096);
      s.copyDeviceToHostAsync(reg, 2 * MIB, d.address(), 4096);
      s.synchronize();
      ByteBuffer back = shm.slice(2 * MIB, 4096);
      assertEquals(0x1122334455667788L, back.getLong(0));
      assertEquals(42L, back.getLong(4088));
      reg.close();
      assertDoesNotThrowTwice(reg);
      // Unregistered, the memory is still mapped and can be registered again.
      ctx.registerHost(shm.address(), shm.size(), false).close();
    }
  }

  @Test
  void readOnlyRegisteredMemoryIsOnlyACopySource() throws Exception {
    try (SharedMemory shm = SharedMemory.anonymous("contract-ro", 2 * MIB);
        SharedMemory ro = SharedMemory.open(Path.of("/proc/self/fd/" + shm.fd()), true);
        DeviceBuffer d = ctx.allocate(2 * MIB); GpuStream s = ctx.createStream()) {
      shm.slice(0, 8).putLong(0, 77L);
      PinnedBuffer reg;
      try {
        reg = ctx.registerHost(ro.address(), ro.size(), true);
      } catch (CudaException e) {
        Assumptions.assumeTrue(e.code() != CudaError.CUDA_ERROR_NOT_SUPPORTED,
            "this device cannot register read-only host memory: " + e.getMessage());
        throw e;
      }
      try (reg) {
        assertTrue(reg.isReadOnly());
        assertThrows(ReadOnlyBufferException.class, () -> reg.slice(0, 8).putLong(0, 1L));
        s.copyHostToDeviceAsync(d.address(), reg, 0, 8);
        s.synchronize();
        assertEquals(77L, readLongs(ctx, d.address(), 1)[0]);
        assertThrows(IllegalArgumentException.class, () -> s.copyDeviceToHostAsync(reg, 0, d.address(), 8));
      }
    }
  }

  @Test
  void exportedMemoryMapsInASecondContextWithTheSameBytes() {
    try (PhysicalMemory mem = ctx.createExportableMemory(2 * MIB); VirtualRange r1 = ctx.reserve(2 * MIB, 0)) {
      assertTrue(mem.isExportable());
      Mapping m1 = r1.map(0, mem);
      m1.setAccess(MemoryAccess.READ_WRITE);
      ctx.memsetD32(r1.address(), 0x5eed, 8);
      int fd = mem.exportPosixFd();
      try (GpuContext other = driver.createContext(0); PhysicalMemory imported = other.importMemory(fd, 2 * MIB);
          VirtualRange r2 = other.reserve(2 * MIB, 0)) {
        Mapping m2 = r2.map(0, imported);
        m2.setAccess(MemoryAccess.READ);
        assertEquals(MemoryAccess.READ, m2.access());
        assertEquals(0x5eed, (int) readLongs(other, r2.address(), 1)[0]);
        ctx.memsetD32(r1.address(), 0x0dd, 2);
        assertEquals(0x0dd, (int) readLongs(other, r2.address(), 1)[0], "one memory behind both mappings");
      } finally {
        ProcessFds.close(fd);
      }
    }
  }

  @Test
  void memoryNotCreatedExportableCannotBeExported() {
    try (PhysicalMemory mem = ctx.createMemory(2 * MIB)) {
      assertFalse(mem.isExportable());
      assertThrows(IllegalStateException.class, mem::exportPosixFd);
    }
  }

  @Test
  void anotherProcessTakesTheDescriptorImportsAndMapsReadOnly() throws Exception {
    try (PhysicalMemory mem = ctx.createExportableMemory(4 * MIB); VirtualRange r = ctx.reserve(4 * MIB, 0)) {
      Mapping m = r.map(0, mem);
      m.setAccess(MemoryAccess.READ_WRITE);
      ctx.memsetD32(r.address(), 0xC0FFEE, MIB);
      int fd = mem.exportPosixFd();
      try {
        ChildJvm.Result child = ChildJvm.run(ContractChild.class, deviceChoice(), "import-read-only", Long.toString(ProcessFds.currentPid()),
            Integer.toString(fd), Long.toString(4 * MIB));
        assertEquals(0, child.exitCode(), child.output());
        System.out.println("imported in another process: " + child.values());
        assertEquals(Integer.toHexString(0xC0FFEE), child.get("first"));
        assertEquals("true", child.get("allSame"), "the importer sees every byte the exporter wrote");
        assertNotEquals("ok", child.get("memset"), "a write through a read-only mapping must be refused");
      } finally {
        ProcessFds.close(fd);
      }
      assertEquals(0xC0FFEE, (int) readLongs(ctx, r.address() + 4 * MIB - 8, 1)[0], "the exporter's bytes unchanged");
    }
  }

  // ---- device memory, and devices reaching each other's ----

  @Test
  void reportsFreeAndTotalMemoryOfItsDevice() {
    DeviceMemoryInfo before = ctx.memoryInfo();
    long total = ctx.device().totalMemoryBytes();
    assertTrue(before.freeBytes() <= before.totalBytes(), before.toString());
    assertTrue(Math.abs(before.totalBytes() - total) <= total / 100, before + " against " + total);
    try (DeviceBuffer b = ctx.allocate(64 * MIB)) {
      DeviceMemoryInfo after = ctx.memoryInfo();
      assertTrue(before.freeBytes() - after.freeBytes() >= 32 * MIB, before + " then " + after);
    }
  }

  @Test
  void physicalMemoryKnowsItsDeviceImportedToo() {
    try (PhysicalMemory plain = ctx.createMemory(2 * MIB); PhysicalMemory mem = ctx.createExportableMemory(2 * MIB)) {
      assertEquals(0, plain.deviceOrdinal());
      assertEquals(0, mem.deviceOrdinal());
      int fd = mem.exportPosixFd();
      try (PhysicalMemory imported = ctx.importMemory(fd, 2 * MIB)) {
        assertEquals(0, imported.deviceOrdinal());
      } finally {
        ProcessFds.close(fd);
      }
    }
  }

  @Test
  void peerQuestionsAndGrantsCheckTheirOrdinals() {
    int n = driver.devices().size();
    assertThrows(IllegalArgumentException.class, () -> driver.canAccessPeer(0, 0));
    assertThrows(IllegalArgumentException.class, () -> driver.canAccessPeer(0, n));
    assertThrows(IllegalArgumentException.class, () -> driver.canAccessPeer(-1, 0));
    try (DeviceBuffer b = ctx.allocate(MIB)) {
      assertThrows(IllegalArgumentException.class, () -> b.setAccessFor(n, MemoryAccess.READ));
      b.setAccessFor(0, MemoryAccess.READ_WRITE);
    }
  }

  /** A second device that the first can reach; the test is skipped, with the reason, where there is none. */
  private GpuContext peerContext() {
    Assumptions.assumeTrue(driver.devices().size() >= 2, () -> "one device only: " + driver.devices().size());
    Assumptions.assumeTrue(driver.canAccessPeer(0, 1) && driver.canAccessPeer(1, 0),
        "devices 0 and 1 cannot reach each other's memory");
    return driver.createContext(1);
  }

  @Test
  void aDeviceCopiesFromAnotherDevicesMemoryOnceGrantedAccessByEitherCall() {
    int n = (int) (3 * MIB);
    byte[] bytes = randomBytes(n, 27);
    try (GpuContext peer = peerContext(); DeviceBuffer theirs = peer.allocate(n); DeviceBuffer mine = ctx.allocate(n);
        DeviceBuffer again = ctx.allocate(n); GpuStream stream = ctx.createStream()) {
      assertEquals(1, peer.device().ordinal());
      ByteBuffer src = ByteBuffer.allocateDirect(n);
      src.put(bytes).flip();
      theirs.copyFromHost(src);
      theirs.setAccessFor(0, MemoryAccess.READ);
            // Unified addressing: this device's copy engine pulls the peer's bytes.
      stream.copyDeviceToDeviceAsync(mine.address(), theirs.address(), n);
      // The explicit call names both contexts.
      stream.copyPeerAsync(again.address(), ctx, theirs.address(), peer, n);
      stream.synchronize();
      ByteBuffer back = ByteBuffer.allocateDirect(n);
      mine.copyToHost(back);
      assertEquals(ByteBuffer.wrap(bytes), back, "pulled through unified addressing");
      back.clear();
      again.copyToHost(back);
      assertEquals(ByteBuffer.wrap(bytes), back, "pulled through cuMemcpyPeerAsync");
    }
  }

  @Test
  void memoryOnAnotherDeviceCountsThereAndItsStreamsWaitOnThisDevicesEvents() {
    try (GpuContext peer = peerContext()) {
      long freeHere = ctx.memoryInfo().freeBytes();
      long freeThere = peer.memoryInfo().freeBytes();
      try (DeviceBuffer b = peer.allocate(64 * MIB); GpuStream mine = ctx.createStream();
          GpuStream theirs = peer.createStream(); GpuEvent filled = ctx.createEvent(false);
          DeviceBuffer here = ctx.allocate(64 * MIB)) {
        assertTrue(freeThere - peer.memoryInfo().freeBytes() >= 32 * MIB, "the peer's memory is used");
        assertTrue(freeHere - ctx.memoryInfo().freeBytes() < 128 * MIB, "this device's is not, beyond its own");
        b.setAccessFor(0, MemoryAccess.READ_WRITE);
        // This device fills the peer's memory; the peer's stream waits for that event before copying it back.
        mine.memsetD32Async(here.address(), 0x7e57, 16 * MIB);
        mine.copyDeviceToDeviceAsync(b.address(), here.address(), 64 * MIB);
        mine.record(filled);
        theirs.waitFor(filled);
        theirs.memsetD32Async(b.address(), 0x1111, 1);
        theirs.synchronize();
        int[] ints = readInts(peer, b.address(), 2);
        assertEquals(0x1111, ints[0], "the peer's own memset ran after the copy");
        assertEquals(0x7e57, ints[1], "the copy into the peer's memory landed first");
      }
    }
  }

  @Test
  void anotherDevicesExportedMemoryImportsMapsReadOnlyHereAndKernelsReadIt() {
    int n = 4096;
    float[] xs = randomFloats(n, 5);
    float[] ys = randomFloats(n, 6);
    try (GpuContext peer = peerContext(); PhysicalMemory mem = peer.createExportableMemory(2 * MIB);
        VirtualRange theirs = peer.reserve(2 * MIB, 0)) {
      Mapping m = theirs.map(0, mem);
      m.setAccess(MemoryAccess.READ_WRITE);
      peer.copyHostToDevice(theirs.address(), floatsToBuffer(xs));
      int fd = mem.exportPosixFd();
      try (PhysicalMemory imported = ctx.importMemory(fd, 2 * MIB); VirtualRange here = ctx.reserve(2 * MIB, 0);
          DeviceBuffer y = ctx.allocate(4L * n); GpuStream s = ctx.createStream()) {
        assertEquals(1, imported.deviceOrdinal(), "imported memory lives where it was made");
        Mapping mine = here.map(0, imported);
        mine.setAccess(MemoryAccess.READ);
        assertEquals(MemoryAccess.READ, mine.accessFor(0));
        assertArrayEquals(xs, readFloats(ctx, here.address(), n));
        y.copyFromHost(floatsToBuffer(ys));
        module.kernel(ContractKernels.SAXPY).launch(Dim3.of((n + 255) / 256), Dim3.of(256), s, 2.0f, here.address(),
            y.address(), n);
        s.synchronize();
        assertArrayEquals(saxpy(2.0f, xs, ys), readFloats(ctx, y.address(), n), "a kernel read the peer's memory");
      } finally {
        ProcessFds.close(fd);
      }
    }
  }

  // ---- host memory and copies ----

  @Test
  void pinnedMemoryIsALittleEndianDirectView() {
    try (PinnedBuffer p = ctx.allocatePinned(3 * MIB)) {
      assertNotEquals(0, p.address());
      assertEquals(3 * MIB, p.size());
      ByteBuffer all = p.asByteBuffer();
      assertTrue(all.isDirect());
      assertEquals(ByteOrder.LITTLE_ENDIAN, all.order());
      assertEquals(3 * MIB, all.capacity());
      all.putInt((int) MIB, 0xCAFEBABE);
      ByteBuffer slice = p.slice(MIB, 16);
      assertEquals(16, slice.remaining());
      assertEquals(0xCAFEBABE, slice.getInt(0));
      assertThrows(IllegalArgumentException.class, () -> p.slice(3 * MIB - 8, 16));
      p.close();
      p.close();
      assertThrows(IllegalStateException.class, p::asByteBuffer);
    }
  }

  @Test
  void synchronousCopiesMoveBytesAndLeaveBufferPositionsAlone() {
    int n = 300_000;
    byte[] data = randomBytes(n, 3);
    try (DeviceBuffer a = ctx.allocate(n); DeviceBuffer b = ctx.allocate(n)) {
      ByteBuffer heap = ByteBuffer.wrap(data);
      heap.position(7);
      ctx.copyHostToDevice(a.address(), heap);
      assertEquals(7, heap.position());
      ctx.copyDeviceToDevice(b.address(), a.address(), n - 7);
      ByteBuffer direct = ByteBuffer.allocateDirect(n - 7);
      ctx.copyDeviceToHost(direct, b.address());
      assertEquals(0, direct.position());
      byte[] back = new byte[n - 7];
      direct.get(back);
      assertArrayEquals(Arrays.copyOfRange(data, 7, n), back);
      byte[] heapBack = new byte[n - 7];
      ctx.copyDeviceToHost(ByteBuffer.wrap(heapBack), a.address());
      assertArrayEquals(back, heapBack);
    }
  }

  @Test
  void memsetFillsBytesAndWords() {
    try (DeviceBuffer a = ctx.allocate(MIB)) {
      ctx.memsetD32(a.address(), 0x11223344, 1024);
      ctx.memsetD8(a.address() + 8, (byte) 0xAB, 4);
      int[] w = readInts(ctx, a.address(), 1024);
      assertEquals(0x11223344, w[0]);
      assertEquals(0xABABABAB, w[2]);
      assertEquals(0x11223344, w[1023]);
    }
  }

  @Test
  void asynchronousCopiesRunInStreamOrder() {
    int bytes = 8 << 20;
    byte[] data = randomBytes(bytes, 4);
    try (PinnedBuffer in = ctx.allocatePinned(bytes); PinnedBuffer out = ctx.allocatePinned(bytes);
        DeviceBuffer a = ctx.allocate(bytes); DeviceBuffer b = ctx.allocate(bytes); GpuStream s = ctx.createStream()) {
      in.asByteBuffer().put(data);
      s.copyHostToDeviceAsync(a.address(), in, 0, bytes);
      s.copyDeviceToDeviceAsync(b.address(), a.address(), bytes);
      s.memsetD8Async(b.address(), (byte) 0x5A, 16);
      s.memsetD32Async(b.address() + 16, 0x01010101, 4);
      s.copyDeviceToHostAsync(out, 0, b.address(), bytes);
      s.synchronize();
      assertTrue(s.isIdle());
      byte[] back = new byte[bytes];
      out.asByteBuffer().get(back);
      for (int i = 0; i < 16; i++) {
        assertEquals((byte) 0x5A, back[i]);
      }
      for (int i = 16; i < 32; i++) {
        assertEquals((byte) 0x01, back[i]);
      }
      assertArrayEquals(Arrays.copyOfRange(data, 32, bytes), Arrays.copyOfRange(back, 32, bytes));
    }
  }

  @Test
  void asynchronousCopiesCheckPinnedBoundsBeforeSubmitting() {
    try (PinnedBuffer p = ctx.allocatePinned(MIB); DeviceBuffer a = ctx.allocate(MIB); GpuStream s = ctx.createStream()) {
      assertThrows(IllegalArgumentException.class, () -> s.copyHostToDeviceAsync(a.address(), p, MIB - 4, 8));
      assertThrows(IllegalArgumentException.class, () -> s.copyDeviceToHostAsync(p, -1, a.address(), 8));
      assertThrows(IllegalArgumentException.class, () -> s.copyHostToDeviceAsync(a.address(), p, 0, -8));
      s.synchronize();
    }
  }

  @Test
  void copiesToUnmappedDeviceMemoryFailCleanly() {
    try (VirtualRange range = ctx.reserve(2 * MIB, 0)) {
      ByteBuffer src = ByteBuffer.allocateDirect(64);
      assertThrows(CudaException.class, () -> ctx.copyHostToDevice(range.address(), src));
    }
    // The context is still usable.
    try (DeviceBuffer a = ctx.allocate(MIB)) {
      ctx.memsetD32(a.address(), 3, 1);
      assertEquals(3, readInts(ctx, a.address(), 1)[0]);
    }
  }

  // ---- streams and events ----

  @Test
  void eventsOrderWorkAcrossStreams() {
    int bytes = 32 << 20;
    byte[] data = randomBytes(bytes, 5);
    try (PinnedBuffer in = ctx.allocatePinned(bytes); PinnedBuffer out = ctx.allocatePinned(bytes);
        DeviceBuffer a = ctx.allocate(bytes); DeviceBuffer b = ctx.allocate(bytes);
        GpuStream producer = ctx.createStream(); GpuStream consumer = ctx.createStream();
        GpuEvent uploaded = ctx.createEvent(false)) {
      in.asByteBuffer().put(data);
      producer.copyHostToDeviceAsync(a.address(), in, 0, bytes);
      producer.record(uploaded);
      consumer.waitFor(uploaded);
      consumer.copyDeviceToDeviceAsync(b.address(), a.address(), bytes);
      consumer.copyDeviceToHostAsync(out, 0, b.address(), bytes);
      consumer.synchronize();
      assertTrue(uploaded.isComplete());
      byte[] back = new byte[bytes];
      out.asByteBuffer().get(back);
      assertArrayEquals(data, back);
    }
  }

  @Test
  void eventsTimeWorkAndReportWhetherItIsDone() {
    try (GpuEvent start = ctx.createEvent(); GpuEvent end = ctx.createEvent(); GpuEvent untimed = ctx.createEvent(false);
        GpuStream s = ctx.createStream(); DeviceBuffer a = ctx.allocate(64 * MIB)) {
      assertTrue(start.isComplete(), "an event never recorded is complete");
      s.record(start);
      s.memsetD32Async(a.address(), 1, 16 * MIB);
      end.record(s);
      untimed.record(s);
      end.synchronize();
      assertTrue(end.isComplete());
      float ms = end.elapsedMillisSince(start);
      assertTrue(ms >= 0 && ms < 60_000, "elapsed " + ms);
      untimed.synchronize();
      CudaException e = assertThrows(CudaException.class, () -> untimed.elapsedMillisSince(start));
      assertEquals(CudaError.CUDA_ERROR_INVALID_HANDLE, e.code());
    }
  }

  @Test
  void contextSynchronizeWaitsForEveryStream() {
    try (GpuStream s1 = ctx.createStream(); GpuStream s2 = ctx.createStream(); DeviceBuffer a = ctx.allocate(64 * MIB)) {
      s1.memsetD32Async(a.address(), 4, 8 * MIB);
      s2.memsetD32Async(a.address() + 32 * MIB, 5, 8 * MIB);
      ctx.synchronize();
      assertTrue(s1.isIdle());
      assertTrue(s2.isIdle());
      assertEquals(5, readInts(ctx, a.address() + 64 * MIB - 4, 1)[0]);
    }
  }

  // ---- modules and kernels ----

  @Test
  void jitsPtxKeepsTheCubinAndReadsEntries() {
    assertTrue(module.ptx().isPresent());
    assertTrue(module.cubin().length > 0);
    assertTrue(module.kernelNames().containsAll(List.of(ContractKernels.EMPTY, ContractKernels.SAXPY,
        ContractKernels.STRUCT, ContractKernels.SCALARS, ContractKernels.STORE)), module.kernelNames().toString());
    Kernel saxpy = module.kernel(ContractKernels.SAXPY);
    assertEquals(ContractKernels.SAXPY, saxpy.name());
    assertEquals(List.of(ParamType.FLOAT32, ParamType.INT64, ParamType.INT64, ParamType.INT32),
        saxpy.params().params().stream().map(KernelParam::type).toList());
    assertEquals(List.of(0, 8, 16, 24), saxpy.params().params().stream().map(KernelParam::offset).toList());
    assertEquals(28, saxpy.params().totalSize());
    assertTrue(module.kernel(ContractKernels.SAXPY) == saxpy, "kernels are looked up once");
  }

  @Test
  void launchesSaxpyFromPtx() {
    runSaxpy(module.kernel(ContractKernels.SAXPY), 100_003);
  }

  @Test
  void loadsItsOwnCubinAndReadsTheParameterLayoutFromIt() {
    try (GpuModule fromCubin = ctx.loadCubin(module.cubin())) {
      assertTrue(fromCubin.ptx().isEmpty());
      Kernel saxpy = fromCubin.kernel(ContractKernels.SAXPY);
      Kernel fromPtx = module.kernel(ContractKernels.SAXPY);
      assertEquals(fromPtx.params().totalSize(), saxpy.params().totalSize());
      for (int i = 0; i < fromPtx.params().count(); i++) {
        assertEquals(fromPtx.params().get(i).offset(), saxpy.params().get(i).offset());
        assertEquals(fromPtx.params().get(i).size(), saxpy.params().get(i).size());
      }
      KernelParam struct = fromCubin.kernel(ContractKernels.STRUCT).params().get(0);
      assertEquals(24, struct.size());
      runSaxpy(saxpy, 4097);
    }
  }

  @Test
  void marshalsEveryScalarWidth() {
    try (DeviceBuffer out = ctx.allocate(MIB); GpuStream s = ctx.createStream()) {
      module.kernel(ContractKernels.SCALARS).launch(Dim3.of(1), Dim3.of(32), s,
          (byte) -5, (short) -1234, -123_456_789, 1L << 40, 1.5f, -2.25e100, out);
      s.synchronize();
      ByteBuffer back = ByteBuffer.allocate(48).order(ByteOrder.LITTLE_ENDIAN);
      out.copyToHost(back);
      assertEquals(-5.0, back.getDouble(0));
      assertEquals(-1234.0, back.getDouble(8));
      assertEquals(-123_456_789.0, back.getDouble(16));
      assertEquals((double) (1L << 40), back.getDouble(24));
      assertEquals(1.5, back.getDouble(32));
      assertEquals(-2.25e100, back.getDouble(40));
    }
  }

  @Test
  void passesAStructByValue() {
    int n = 5000;
    try (DeviceBuffer out = ctx.allocate(4L * n); GpuStream s = ctx.createStream()) {
      Kernel k = module.kernel(ContractKernels.STRUCT);
      KernelParam p = k.params().get(0);
      assertEquals(ParamType.BYTES, p.type());
      assertEquals(24, p.size());
      ByteBuffer struct = ByteBuffer.allocate(24).order(ByteOrder.LITTLE_ENDIAN);
      struct.putLong(0, out.address()).putInt(8, n).putFloat(12, 0.5f).putDouble(16, 3.0);
      KernelArgs args = k.newArgs().set(0, struct.array());
      k.launch(Dim3.of(8), Dim3.of(128), 0, s, args);
      s.synchronize();
      float[] got = readFloats(ctx, out.address(), n);
      for (int i = 0; i < n; i++) {
        assertEquals(Math.fma(0.5f, (float) i, 3.0f), got[i], "element " + i);
      }
    }
  }

  @Test
  void reusesAnArgumentSlabAcrossLaunches() {
    int n = 1024;
    try (DeviceBuffer x = ctx.allocate(4L * n); DeviceBuffer y = ctx.allocate(4L * n); GpuStream s = ctx.createStream()) {
      ctx.copyHostToDevice(x.address(), floatsToBuffer(filled(n, 1f)));
      ctx.copyHostToDevice(y.address(), floatsToBuffer(filled(n, 0f)));
      Kernel k = module.kernel(ContractKernels.SAXPY);
      KernelArgs args = k.newArgs().set(0, 1f).set(1, x).set(2, y).set(3, n);
      for (int i = 0; i < 100; i++) {
        k.launch(Dim3.of(4), Dim3.of(256), 0, s, args);
      }
      args.set(0, 0.5f);
      k.launch(Dim3.of(4), Dim3.of(256), 0, s, args);
      s.synchronize();
      float[] got = readFloats(ctx, y.address(), n);
      assertEquals(100.5f, got[0]);
      assertEquals(100.5f, got[n - 1]);
    }
  }

  @Test
  void emptyKernelLaunchesAndSynchronizes() {
    Kernel empty = module.kernel(ContractKernels.EMPTY);
    assertEquals(0, empty.params().count());
    try (GpuStream s = ctx.createStream()) {
      for (int i = 0; i < 1000; i++) {
        empty.launch(Dim3.of(1), Dim3.of(1), s);
      }
      s.synchronize();
      assertTrue(s.isIdle());
    }
  }

  @Test
  void aLaunchGetsMoreThan48KiBOfDynamicSharedMemoryOnlyOnceTheKernelAllowsIt() {
    Kernel empty = module.kernel(ContractKernels.EMPTY);
    int bytes = 100 << 10;
    try (GpuStream s = ctx.createStream()) {
      KernelArgs args = empty.newArgs();
      CudaException refused = assertThrows(CudaException.class,
          () -> empty.launch(Dim3.of(1), Dim3.of(32), bytes, s, args));
      assertEquals(CudaError.CUDA_ERROR_INVALID_VALUE, refused.code(), refused.getMessage());
      empty.setMaxDynamicSharedMemory(bytes);
      empty.setMaxDynamicSharedMemory(bytes / 2);
      empty.launch(Dim3.of(2), Dim3.of(32), bytes, s, args);
      s.synchronize();
      CudaException tooMuch = assertThrows(CudaException.class, () -> empty.setMaxDynamicSharedMemory(1 << 20));
      assertEquals(CudaError.CUDA_ERROR_INVALID_VALUE, tooMuch.code(), tooMuch.getMessage());
      empty.launch(Dim3.of(1), Dim3.of(32), bytes, s, args);
      s.synchronize();
      assertThrows(IllegalArgumentException.class, () -> empty.setMaxDynamicSharedMemory(-1));
    }
  }

  // ---- bad input ----

  @Test
  void garbagePtxFailsWithTheJitLogAndLeavesTheContextUsable() {
    PtxCompileException e = assertThrows(PtxCompileException.class,
        () -> ctx.loadPtx(".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry broken() {\n  frobnicate.u32 %r1;\n}\n"));
    assertFalse(e.jitLog().isBlank(), "the JIT log says what is wrong");
    assertTrue(e.getMessage().contains(e.jitLog().strip().lines().findFirst().orElseThrow()));
    assertThrows(PtxCompileException.class, () -> ctx.loadPtx("this is not PTX at all"));
    runSaxpy(module.kernel(ContractKernels.SAXPY), 33);
  }

  @Test
  void anUnknownKernelIsNotFound() {
    CudaException e = assertThrows(CudaException.class, () -> module.kernel("no_such_kernel"));
    assertEquals(CudaError.CUDA_ERROR_NOT_FOUND, e.code());
  }

  @Test
  void aCorruptCubinIsRefused() {
    byte[] junk = randomBytes(4096, 6);
    assertThrows(CudaException.class, () -> ctx.loadCubin(junk));
  }

  @Test
  void wrongArgumentsAreRefusedBeforeTheDriverIsCalled() {
    int n = 256;
    try (DeviceBuffer x = ctx.allocate(4L * n); DeviceBuffer y = ctx.allocate(4L * n); GpuStream s = ctx.createStream()) {
      ctx.memsetD32(y.address(), 0x7F7F7F7F, n);
      Kernel k = module.kernel(ContractKernels.SAXPY);
      Dim3 g = Dim3.of(1);
      Dim3 b = Dim3.of(256);
      IllegalArgumentException count = assertThrows(IllegalArgumentException.class, () -> k.launch(g, b, s, 1f, x, y));
      assertTrue(count.getMessage().contains("4"), count.getMessage());
      assertThrows(IllegalArgumentException.class, () -> k.launch(g, b, s, 1f, x, y, n, n));
      IllegalArgumentException type = assertThrows(IllegalArgumentException.class, () -> k.launch(g, b, s, 1f, 5, y, n));
      assertTrue(type.getMessage().contains(k.params().get(1).name()), type.getMessage());
      assertThrows(IllegalArgumentException.class, () -> k.launch(g, b, s, 1.0, x, y, n));
      assertThrows(IllegalArgumentException.class, () -> k.launch(g, b, s, 1f, x, y, (long) n));
      assertThrows(IllegalArgumentException.class, () -> k.launch(g, b, s, 1f, x, null, n));
      KernelArgs partial = k.newArgs().set(0, 1f).set(1, x);
      assertThrows(IllegalArgumentException.class, () -> k.launch(g, b, 0, s, partial));
      assertThrows(IllegalArgumentException.class, () -> partial.set(7, 1));
      KernelArgs foreign = module.kernel(ContractKernels.STORE).newArgs().set(0, 0L).set(1, 0);
      assertThrows(IllegalArgumentException.class, () -> k.launch(g, b, 0, s, foreign));
      assertThrows(IllegalArgumentException.class, () -> Dim3.of(0));
      s.synchronize();
      // Nothing ran: y still holds its sentinel.
      assertEquals(0x7F7F7F7F, readInts(ctx, y.address(), n)[n - 1]);
    }
  }

  @Test
  void outOfMemoryIsItsOwnExceptionAndTheContextKeepsWorking() {
    long g = ctx.granularity();
    long tooMuch = (ctx.device().totalMemoryBytes() * 2 + g - 1) / g * g;
    CudaOutOfMemoryException e = assertThrows(CudaOutOfMemoryException.class, () -> ctx.createMemory(tooMuch));
    assertEquals(CudaError.CUDA_ERROR_OUT_OF_MEMORY, e.code());
    assertThrows(CudaOutOfMemoryException.class, () -> ctx.allocate(tooMuch));
    runSaxpy(module.kernel(ContractKernels.SAXPY), 1000);
  }

  @Test
  void anIllegalAddressPoisonsTheWholeProcess() throws Exception {
    ChildJvm.Result child = ChildJvm.run(ContractChild.class, deviceChoice(), "illegal-address");
    assertEquals(0, child.exitCode(), child.output());
    System.out.println("after an illegal address: " + child.values());
    assertEquals("returned", child.get("launch"), "launches are asynchronous: the fault surfaces later");
    assertEquals("CUDA_ERROR_ILLEGAL_ADDRESS", child.get("sync"));
    assertEquals("CUDA_ERROR_ILLEGAL_ADDRESS", child.get("contextSync"), "the context stays poisoned");
    assertEquals("CUDA_ERROR_ILLEGAL_ADDRESS", child.get("relaunch"), "nothing runs on it any more");
    assertNotEquals("ok", child.get("memset"));
    // The error is sticky for the process, not the context (docs/design/gpu-driver.md). Only a new process recovers.
    assertEquals("CUDA_ERROR_ILLEGAL_ADDRESS", child.get("fresh"), "a context created afterwards cannot run work either");
  }

  @Test
  void everyHandleRefusesUseAfterClose() {
    DeviceBuffer buf = ctx.allocate(MIB);
    GpuStream s = ctx.createStream();
    GpuEvent e = ctx.createEvent();
    PinnedBuffer p = ctx.allocatePinned(4096);
    VirtualRange r = ctx.reserve(2 * MIB, 0);
    PhysicalMemory mem = ctx.createMemory(2 * MIB);
    GpuModule m = ctx.loadPtx(ContractKernels.ptx());
    Kernel k = m.kernel(ContractKernels.EMPTY);
    for (AutoCloseable c : List.<AutoCloseable>of(buf, s, e, p, r, m)) {
      assertDoesNotThrowTwice(c);
    }
    assertThrows(IllegalStateException.class, buf::address);
    assertThrows(IllegalStateException.class, s::synchronize);
    assertThrows(IllegalStateException.class, e::isComplete);
    assertThrows(IllegalStateException.class, p::address);
    assertThrows(IllegalStateException.class, () -> r.map(0, mem));
    mem.close();
    mem.close();
    assertThrows(IllegalStateException.class, () -> m.kernel(ContractKernels.SAXPY));
    try (GpuStream live = ctx.createStream()) {
      assertThrows(IllegalStateException.class, () -> k.launch(Dim3.of(1), Dim3.of(1), live));
    }
  }

  // ---- helpers ----

  private void runSaxpy(Kernel saxpy, int n) {
    float[] xs = randomFloats(n, n);
    float[] ys = randomFloats(n, n + 1);
    try (DeviceBuffer x = ctx.allocate(4L * n); DeviceBuffer y = ctx.allocate(4L * n); GpuStream s = ctx.createStream()) {
      x.copyFromHost(floatsToBuffer(xs));
      y.copyFromHost(floatsToBuffer(ys));
      saxpy.launch(Dim3.of((n + 255) / 256), Dim3.of(256), s, 3.0f, x.address(), y.address(), n);
      s.synchronize();
      assertArrayEquals(saxpy(3.0f, xs, ys), readFloats(ctx, y.address(), n));
    }
  }

  private static void assertDoesNotThrowTwice(AutoCloseable c) {
    try {
      c.close();
      c.close();
    } catch (Exception e) {
      throw new AssertionError("close() must be idempotent: " + c, e);
    }
  }

  static float[] saxpy(float a, float[] x, float[] y) {
    float[] out = new float[x.length];
    for (int i = 0; i < x.length; i++) {
      out[i] = Math.fma(a, x[i], y[i]);
    }
    return out;
  }

  static float[] randomFloats(int n, long seed) {
    Random r = new Random(seed);
    float[] a = new float[n];
    for (int i = 0; i < n; i++) {
      a[i] = r.nextFloat() * 2 - 1;
    }
    return a;
  }

  static float[] filled(int n, float v) {
    float[] a = new float[n];
    Arrays.fill(a, v);
    return a;
  }

  static byte[] randomBytes(int n, long seed) {
    byte[] b = new byte[n];
    new Random(seed).nextBytes(b);
    return b;
  }

  static ByteBuffer floatsToBuffer(float[] a) {
    ByteBuffer b = ByteBuffer.allocateDirect(4 * a.length).order(ByteOrder.LITTLE_ENDIAN);
    b.asFloatBuffer().put(a);
    return b;
  }

  static float[] readFloats(GpuContext c, long address, int n) {
    ByteBuffer b = ByteBuffer.allocateDirect(4 * n).order(ByteOrder.LITTLE_ENDIAN);
    c.copyDeviceToHost(b, address);
    float[] a = new float[n];
    b.asFloatBuffer().get(a);
    return a;
  }

  static long[] readLongs(GpuContext c, long address, int n) {
    ByteBuffer b = ByteBuffer.allocateDirect(8 * n).order(ByteOrder.LITTLE_ENDIAN);
    c.copyDeviceToHost(b, address);
    long[] a = new long[n];
    b.asLongBuffer().get(a);
    return a;
  }

  static int[] readInts(GpuContext c, long address, int n) {
    ByteBuffer b = ByteBuffer.allocateDirect(4 * n).order(ByteOrder.LITTLE_ENDIAN);
    c.copyDeviceToHost(b, address);
    int[] a = new int[n];
    b.asIntBuffer().get(a);
    return a;
  }
}
