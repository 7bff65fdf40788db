package dev.thaw.runtime.gpu.contract;

import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.gpu.VirtualRange;
import dev.thaw.runtime.host.ProcessFds;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The second process of the contract suite. Prints {@code result.KEY=VALUE} lines; exit code 0 means the
 * scenario ran to its end.
 *
 * <p>Usage: {@code ContractChild cuda|sim SCENARIO [ARGS]}, scenarios:
 * <ul>
 *   <li>{@code map-at ADDRESS_HEX} — allocate 4 MiB exactly at that address, write and read it back;
 *   <li>{@code illegal-address} — store to an unmapped address, then see what the context and a new one do;
 *   <li>{@code write-read-only} — store into a mapping with read-only access.
 * </ul>
 */
public final class ContractChild {

  public static void main(String[] args) throws Exception {
    DeviceChoice choice = DeviceChoice.parse(args[0]);
    try (GpuDriver driver = GpuDrivers.open(choice)) {
      switch (args[1]) {
        case "map-at" -> mapAt(driver, Long.parseUnsignedLong(args[2], 16));
        case "illegal-address" -> illegalAddress(driver);
        case "write-read-only" -> writeReadOnly(driver);
        case "import-read-only" -> importReadOnly(driver, Long.parseLong(args[2]), Integer.parseInt(args[3]),
            Long.parseLong(args[4]));
        default -> throw new IllegalArgumentException("unknown scenario " + args[1]);
      }
    }
    System.out.flush();
    // A poisoned CUDA context can make driver teardown slow or noisy; the scenario is over.
    Runtime.getRuntime().halt(0);
  }

  private static void mapAt(GpuDriver driver, long address) {
    try (GpuContext ctx = driver.createContext(0); DeviceBuffer buf = ctx.allocateAt(address, 4 << 20)) {
      System.out.println("result.address=" + Long.toHexString(buf.address()));
      ByteBuffer data = ByteBuffer.allocateDirect(4096).order(ByteOrder.LITTLE_ENDIAN);
      for (int i = 0; i < 1024; i++) {
        data.putInt(i * 4, i * 7 + 1);
      }
      buf.copyFromHost(data);
      ByteBuffer back = ByteBuffer.allocateDirect(4096).order(ByteOrder.LITTLE_ENDIAN);
      buf.copyToHost(back);
      System.out.println("result.roundtrip=" + back.equals(data));
    }
  }

  private static void illegalAddress(GpuDriver driver) {
    GpuContext ctx = driver.createContext(0);
    GpuModule module = ctx.loadPtx(ContractKernels.ptx());
    GpuStream stream = ctx.createStream();
    long unmapped = 0x10L; // never mapped by either driver
    module.kernel(ContractKernels.STORE).launch(Dim3.of(1), Dim3.of(1), stream, unmapped, 42);
    System.out.println("result.launch=returned");
    System.out.println("result.sync=" + codeOf(stream::synchronize));
    // What a poisoned context still does: VMM calls succeed, work on the device does not (as CUDA does).
    System.out.println("result.contextSync=" + codeOf(ctx::synchronize));
    System.out.println("result.relaunch=" + codeOf(() -> {
      module.kernel(ContractKernels.EMPTY).launch(Dim3.of(1), Dim3.of(1), stream);
      stream.synchronize();
    }));
    System.out.println("result.allocate=" + codeOf(() -> ctx.allocate(1 << 20).close()));
    System.out.println("result.memset=" + codeOf(() -> ctx.memsetD32(0x10L, 1, 1)));
    ctx.close();
    try (GpuContext fresh = driver.createContext(0); DeviceBuffer buf = fresh.allocate(1 << 20)) {
      fresh.memsetD32(buf.address(), 5, 4);
      ByteBuffer back = ByteBuffer.allocateDirect(16).order(ByteOrder.LITTLE_ENDIAN);
      buf.copyToHost(back);
      System.out.println("result.fresh=" + (back.getInt(12) == 5 ? "ok" : "wrong"));
    } catch (CudaException e) {
      System.out.println("result.fresh=" + e.errorName());
    }
  }

  private static void writeReadOnly(GpuDriver driver) {
    GpuContext ctx = driver.createContext(0);
    GpuModule module = ctx.loadPtx(ContractKernels.ptx());
    GpuStream stream = ctx.createStream();
    DeviceBuffer buf = ctx.allocate(2 << 20);
    ctx.memsetD32(buf.address(), 7, 4);
    buf.setAccess(MemoryAccess.READ);
    module.kernel(ContractKernels.STORE).launch(Dim3.of(1), Dim3.of(1), stream, buf.address(), 9);
    System.out.println("result.sync=" + codeOf(stream::synchronize));
  }

  /** Takes the parent's descriptor, imports the memory, maps it read-only, reads it all and tries a memset. */
  private static void importReadOnly(GpuDriver driver, long pid, int parentFd, long size) throws Exception {
    int fd = ProcessFds.take(pid, parentFd);
    GpuContext ctx = driver.createContext(0);
    PhysicalMemory mem = ctx.importMemory(fd, size);
    ProcessFds.close(fd);
    VirtualRange range = ctx.reserve(size, 0);
    range.map(0, mem).setAccess(MemoryAccess.READ);
    ByteBuffer all = ByteBuffer.allocateDirect((int) size).order(ByteOrder.LITTLE_ENDIAN);
    ctx.copyDeviceToHost(all, range.address());
    int first = all.getInt(0);
    boolean same = true;
    for (int i = 0; i < size; i += 4) {
      same &= all.getInt(i) == first;
    }
    System.out.println("result.first=" + Integer.toHexString(first));
    System.out.println("result.allSame=" + same);
    System.out.println("result.memset=" + codeOrRefusal(() -> ctx.memsetD32(range.address(), 1, 1)));
  }

  private static String codeOrRefusal(Runnable r) {
    try {
      r.run();
      return "ok";
    } catch (CudaException e) {
      return e.errorName();
    } catch (RuntimeException e) {
      return e.getClass().getSimpleName();
    }
  }

  private static String codeOf(Runnable r) {
    try {
      r.run();
      return "ok";
    } catch (CudaException e) {
      return e.errorName();
    }
  }
}
