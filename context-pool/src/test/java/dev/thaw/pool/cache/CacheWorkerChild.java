package dev.thaw.pool.cache;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.SessionTable;
import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.runtime.gpu.GpuStream;
import java.nio.ByteBuffer;
import java.nio.ReadOnlyBufferException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/**
 * A worker process of the cache tests: {@code CacheWorkerChild DEVICE ARENA MANIFEST_FILE PLACEMENT_FILE} maps the
 * parent's arena, registers it, restores the image's allocations from it with coalesced copies and checks every
 * device byte against its chunk's digest.
 */
public final class CacheWorkerChild {

  public static void main(String[] args) throws Exception {
    ImageManifest m = ImageManifest.read(Files.readAllBytes(Path.of(args[2])));
    ChunkPlacement placement = ChunkPlacement.fromBytes(Files.readAllBytes(Path.of(args[3])));
    try (GpuDriver driver = GpuDrivers.open(DeviceChoice.parse(args[0]));
        GpuContext ctx = driver.createContext(0); HostCacheView view = HostCacheView.attach(Path.of(args[1]), ctx);
        GpuStream stream = ctx.createStream()) {
      System.out.println("result.readOnly=" + view.isReadOnly());
      try {
        view.buffer().slice(0, 8).putLong(0, 1L);
        System.out.println("result.hostWrite=ok");
      } catch (ReadOnlyBufferException e) {
        System.out.println("result.hostWrite=refused");
      }
      FunctionSession session = FunctionSession.rebuild(ctx, new SessionTable(m.sessionTable(Map.of())
          .allocations(), List.of()));
      System.out.println("result.slabs=" + session.slabs().size());
      PinnedChunks chunks = view.chunks(placement);
      List<CoalescedCopies.Copy> copies = CoalescedCopies.plan(RestoreOrder.allocations(m), chunks);
      CoalescedCopies.queue(copies, stream);
      stream.synchronize();
      System.out.println("result.copies=" + copies.size());
      boolean ok = true;
      for (ImageManifest.Allocation a : m.allocations()) {
        for (ImageManifest.Chunk c : a.chunks()) {
          ByteBuffer b = ByteBuffer.allocateDirect(c.length());
          ctx.copyDeviceToHost(b, a.address() + c.offset());
          ok &= Digest.of(b).equals(c.digest());
        }
      }
      System.out.println("result.deviceBytes=" + (ok ? "match" : "differ"));
      session.close();
    }
  }
}
