package dev.thaw.pool.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.pool.protocol.FrameCodec;
import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.runtime.gpu.VirtualRange;
import java.io.IOException;
import java.nio.file.Files;
import java.util.Map;
import java.nio.file.Path;
import java.io.InputStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class WorkerWarmupTest {

  /**
   * The warm-up swallows a manifest it cannot parse (best effort), so a synthetic manifest the format has
   * outgrown would silently warm nothing: this pins that the large one still reads, at its full size.
   */
  @Test
  void theLargeWarmupManifestIsAValidManifestOfThousandsOfChunks() throws Exception {
    byte[] small;
    try (InputStream in = WorkerWarmup.class.getResourceAsStream("warmup-manifest.json")) {
      small = in.readAllBytes();
    }
    ImageManifest m = ImageManifest.read(WorkerWarmup.largeManifest(small, 440, 12));
    assertEquals(440, m.allocations().size());
    assertEquals(440 * 12, m.allocations().stream().mapToInt(a -> a.chunks().size()).sum());
    assertEquals(440, m.profile().firstAccessOrder().size());
  }

  /**
   * The JSON warm-up writes and reads back a BECOME with every optional part and writes its answer (the code a cold
   * start would otherwise be the first to run): frames the codec refuses would throw here, not warm; and it stops at
   * once when a request waits.
   */
  @Test
  void theJsonWarmupRoundTripsABecomeAndStopsWhenARequestWaits() {
    int[] asked = {0};
    WorkerWarmup.json(FrameCodec.json(), () -> asked[0]++ > 1_000);
    assertEquals(200, asked[0], "asked before each of its rounds");
    asked[0] = 0;
    WorkerWarmup.json(FrameCodec.json(), () -> ++asked[0] > 0);
    assertEquals(1, asked[0], "stopped at once");
  }

  /**
   * The rehearsal runs the prepared restore path end to end (prepare, map, copy, a gated invoke, resident, close)
   * and leaves the context as it found it: the address range it used can be reserved again, exactly, and the
   * restore resources are free for the next restore.
   */
  @Test
  void theRehearsalRestoresASyntheticImageAndLeavesNothingMapped(@TempDir Path dir) throws Exception {
    try (RocksChunkStore store = RocksChunkStore.open(dir.resolve("store"));
        GpuDriver driver = GpuDrivers.open(DeviceChoice.SIM, Map.of());
        GpuContext context = driver.createContext(0);
        RestoreResources resources = RestoreResources.create(context)) {
      WorkerWarmup.rehearse(context, resources, store);
      long bytes = (long) WorkerWarmup.REHEARSAL_ALLOCATIONS * WorkerWarmup.REHEARSAL_CHUNKS_PER_ALLOCATION
          * WorkerWarmup.REHEARSAL_CHUNK_BYTES;
      long address;
      try (VirtualRange r = context.reserve(bytes, 0)) {
        address = r.address();
      }
      context.reserveExact(address, bytes).close();
      // The resources were given back: another rehearsal borrows them.
      WorkerWarmup.rehearse(context, resources, store);
    }
  }

  /**
   * The HBM rehearsal runs a start from the HBM tier end to end on the device (export, take the descriptors back,
   * import and map read-only, restore the rest through {@code TieredRestoreSource}, check the imported and the
   * boundary allocation's bytes; it throws where any of that does not hold) and leaves nothing behind: no
   * descriptor open, the address range free, the resources free.
   */
  @Test
  void theHbmRehearsalImportsItsOwnSlabsChecksTheBytesAndLeavesNothingBehind(@TempDir Path dir) throws Exception {
    try (RocksChunkStore store = RocksChunkStore.open(dir.resolve("store"));
        GpuDriver driver = GpuDrivers.open(DeviceChoice.SIM, Map.of());
        GpuContext context = driver.createContext(0);
        RestoreResources resources = RestoreResources.create(context)) {
      long fds = openDescriptors();
      WorkerWarmup.rehearseHbm(context, resources, store);
      assertEquals(fds, openDescriptors(), "every exported and taken descriptor is closed");
      long bytes = (long) WorkerWarmup.REHEARSAL_ALLOCATIONS * WorkerWarmup.REHEARSAL_CHUNKS_PER_ALLOCATION
          * WorkerWarmup.HBM_REHEARSAL_CHUNK_BYTES;
      long address;
      try (VirtualRange r = context.reserve(bytes, 0)) {
        address = r.address();
      }
      context.reserveExact(address, bytes).close();
      WorkerWarmup.rehearseHbm(context, resources, store);
    }
  }

  private static long openDescriptors() throws IOException {
    try (Stream<Path> s = Files.list(Path.of("/proc/self/fd"))) {
      return s.count();
    }
  }
}
