package dev.thaw.pool.hbm;

import dev.thaw.runtime.function.AllocationRecord;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.SessionTable;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.runtime.gpu.VirtualRange;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Set;

/**
 * A worker of the HBM tier tests, on a table of a 6 MiB read-only {@code weights} buffer and a small {@code act}:
 * <ul>
 *   <li>{@code export DEVICE}: picks a free base address (printed, {@code base=}),: rebuilds, writes the weights, exports its read-only slab, prints it
 *       ({@code slab=...}) and its pid, waits for a line on stdin (the server has taken the descriptor), exits;
 *   <li>{@code import DEVICE SERVER_PID SLAB BASE}: takes the server's descriptor, rebuilds with it, checks the weights'
 *       bytes and that writing them is refused.
 * </ul>
 */
public final class HbmWorkerChild {

  static final long WEIGHTS = 6L << 20;

  /** The image's table at {@code base}: the exporter picks a free base, the importer is told it. */
  static SessionTable table(long base) {
    return new SessionTable(List.of(new AllocationRecord("weights", base, WEIGHTS),
        new AllocationRecord("act", base + WEIGHTS, 1000)), List.of());
  }

  public static void main(String[] args) throws Exception {
    try (GpuDriver driver = GpuDrivers.open(DeviceChoice.parse(args[1]));
        GpuContext ctx = driver.createContext(0)) {
      if (args[0].equals("export")) {
        export(ctx);
      } else {
        importSlabs(ctx, Long.parseLong(args[2]), args[3], Long.parseUnsignedLong(args[4], 16));
      }
    }
  }

  private static void export(GpuContext ctx) throws Exception {
    long base;
    try (VirtualRange probe = ctx.reserve(16L << 20, 0)) {
      base = probe.address();
    }
    System.out.println("result.base=" + Long.toHexString(base));
    try (FunctionSession s = FunctionSession.rebuild(ctx, table(base), Set.of("weights"),
        FunctionSession.SlabSource.EXPORTABLE_READ_ONLY)) {
      s.upload(new BufferRef("weights"), 0, pattern((int) WEIGHTS));
      s.synchronize();
      s.protectReadOnlySlabs();
      List<ExportedSlab> slabs = HbmExport.exportReadOnly(s);
      System.out.println("result.pid=" + ProcessHandle.current().pid());
      System.out.println("result.slab=" + slabs.get(0).encode());
      System.out.flush();
      new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
      HbmExport.close(slabs);
    }
  }

  private static void importSlabs(GpuContext ctx, long serverPid, String slab, long base) throws Exception {
    long t0 = System.nanoTime();
    try (ResidentSlabs resident = ResidentSlabs.take(serverPid, List.of(ExportedSlab.decode(slab)));
        FunctionSession s = FunctionSession.rebuild(ctx, table(base), Set.of("weights"), resident)) {
      double mapMs = (System.nanoTime() - t0) / 1e6;
      System.out.println("result.resident=" + resident.residentBuffers());
      System.out.println("result.importMs=" + resident.importMillis());
      System.out.println("result.takeImportMapMs=" + mapMs);
      ByteBuffer back = ByteBuffer.allocateDirect((int) WEIGHTS).order(ByteOrder.LITTLE_ENDIAN);
      s.download(new BufferRef("weights"), 0, back);
      System.out.println("result.weights=" + (back.equals(pattern((int) WEIGHTS)) ? "same" : "different"));
      String write;
      try {
        s.upload(new BufferRef("weights"), 0, pattern(16));
        write = "ok";
      } catch (CudaException e) {
        write = e.errorName();
      }
      System.out.println("result.write=" + write);
      s.upload(new BufferRef("act"), 0, pattern(16));
      System.out.println("result.act=writable");
    }
  }

  static ByteBuffer pattern(int n) {
    ByteBuffer b = ByteBuffer.allocateDirect(n).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < n; i += 4) {
      b.putInt(i, i * 2654435761L > 0 ? i ^ 0x5bd1e995 : i);
    }
    return b;
  }
}
