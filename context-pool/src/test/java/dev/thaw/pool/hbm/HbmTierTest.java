package dev.thaw.pool.hbm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.ChildJvm;
import dev.thaw.runtime.host.ProcessFds;
import dev.thaw.runtime.host.SharedMemory;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Pins the HBM tier on the sim device, whose exportable memory is a shared file so descriptors carry it across
 * processes as CUDA's do: a worker exports its read-only slab and exits; the server holds the descriptor; the next
 * worker imports it and maps it read-only at the recorded address, sees the first worker's bytes without a copy,
 * and cannot write them. With {@code THAW_DEVICE=cuda} the same test proves it on a GPU. The tier's budget and give-way drop least recently used images and close descriptors.
 */
class HbmTierTest {

  /** The device the worker processes use: the sim device in CI, {@code THAW_DEVICE=cuda} on a GPU host. */
  static final String DEVICE = System.getenv().getOrDefault("THAW_DEVICE", "sim");

  @Test
  void theNextWorkerMapsTheEvictedWorkersWeightsReadOnly() throws Exception {
    String java = ProcessHandle.current().info().command().orElse("java");
    Process first = new ProcessBuilder(java, "-Xmx256m", "-cp", System.getProperty("java.class.path"),
        HbmWorkerChild.class.getName(), "export", DEVICE).redirectErrorStream(true).start();
    try (HbmTier tier = new HbmTier(new HbmTierOptions())) {
      BufferedReader out = new BufferedReader(new InputStreamReader(first.getInputStream(), StandardCharsets.UTF_8));
      long pid = -1;
      String base = null;
      ExportedSlab slab = null;
      StringBuilder log = new StringBuilder();
      for (String line; slab == null && (line = out.readLine()) != null; ) {
        log.append(line).append('\n');
        if (line.startsWith("result.pid=")) {
          pid = Long.parseLong(line.substring("result.pid=".length()));
        } else if (line.startsWith("result.base=")) {
          base = line.substring("result.base=".length());
        } else if (line.startsWith("result.slab=")) {
          slab = ExportedSlab.decode(line.substring("result.slab=".length()));
        }
      }
      assertTrue(slab != null, "the first worker exported nothing:\n" + log);
      assertEquals(List.of("weights"), slab.buffers());
      assertTrue(tier.offer("img", pid, List.of(slab)));
      try (Writer w = new OutputStreamWriter(first.getOutputStream(), StandardCharsets.UTF_8)) {
        w.write("taken\n");
      }
      assertTrue(first.waitFor(60, TimeUnit.SECONDS));
      assertEquals(0, first.exitValue(), log.toString());
      assertEquals(HbmWorkerChild.WEIGHTS, tier.bytes());

      // The first worker is gone; only the server's descriptor keeps the memory.
      ExportedSlab held = tier.slabs("img").orElseThrow().get(0);
      ChildJvm.Result next = ChildJvm.run(HbmWorkerChild.class, "import", DEVICE,
          Long.toString(ProcessFds.currentPid()), held.encode(), base);
      assertEquals(0, next.exitCode(), next.output());
      System.out.println("HBM tier import: " + next.values());
      assertEquals("[weights]", next.get("resident"));
      assertEquals("same", next.get("weights"), "the bytes the evicted worker left, not copied again");
      assertFalse(next.get("write").equals("ok"), "the imported weights are mapped read-only");
      assertEquals("writable", next.get("act"));
    } finally {
      first.destroyForcibly();
    }
  }

  @Test
  void theTierKeepsToItsBudgetAndGivesWayLeastRecentlyUsedFirst() throws Exception {
    long mib = 1L << 20;
    List<SharedMemory> memories = new ArrayList<>();
    try (HbmTier tier = new HbmTier(new HbmTierOptions().setMaxBytes(10 * mib))) {
      long me = ProcessFds.currentPid();
      for (String image : List.of("a", "b", "c")) {
        SharedMemory m = SharedMemory.anonymous(image, 4 * mib);
        memories.add(m);
        assertTrue(tier.offer(image, me, List.of(new ExportedSlab(0x7f0000000000L, 4 * mib, List.of("w"), m.fd()))));
      }
      assertEquals(Map.of("b", 4 * mib, "c", 4 * mib), tier.heldImages(), "a made room: 12 MiB > 10 MiB");
      int cFd = tier.slabs("c").orElseThrow().get(0).fd();
      assertTrue(Files.exists(Path.of("/proc/self/fd/" + cFd)));
      tier.slabs("b");
      // Asking how much of an image is held (placement does) does not make it recently used: c still goes first.
      assertEquals(4 * mib, tier.bytes("c"));
      assertEquals(0, tier.bytes("a"));
      assertEquals(4 * mib, tier.giveWay(1));
      assertEquals(List.of("b"), List.copyOf(tier.heldImages().keySet()), "c was used less recently than b");
      assertFalse(Files.exists(Path.of("/proc/self/fd/" + cFd)), "given way: its descriptor is closed");
      assertFalse(tier.offer("huge", me, List.of(new ExportedSlab(0, 12 * mib, List.of("w"), memories.get(0).fd()))),
          "larger than the budget: refused, nothing dropped");
      assertEquals(4 * mib, tier.bytes());
      assertEquals(4 * mib, tier.giveWay(Long.MAX_VALUE));
      assertEquals(0, tier.bytes());
    } finally {
      memories.forEach(SharedMemory::close);
    }
  }
}
