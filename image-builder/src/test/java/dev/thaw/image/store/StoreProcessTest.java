package dev.thaw.image.store;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** What another process does to the store: a writer killed midway, and a writer holding the lock. */
class StoreProcessTest {

  @TempDir Path dir;

  private Process start(String mode, Path store, Path progress) throws Exception {
    String java = ProcessHandle.current().info().command().orElse("java");
    return new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"), StoreChild.class.getName(),
        mode, store.toString(), progress.toString())
        .redirectErrorStream(true).redirectOutput(dir.resolve(mode + ".log").toFile()).start();
  }

  private String await(Process p, Path progress, Predicate<String> done) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (System.nanoTime() < deadline) {
      if (Files.exists(progress)) {
        String s = Files.readString(progress);
        if (done.test(s)) {
          return s;
        }
      }
      if (!p.isAlive()) {
        throw new AssertionError("child exited " + p.exitValue() + ":\n"
            + Files.readString(dir.resolve(Files.list(dir).filter(f -> f.toString().endsWith(".log"))
            .findFirst().orElseThrow())));
      }
      Thread.sleep(20);
    }
    p.destroyForcibly();
    throw new AssertionError("child made no progress in 60 s");
  }

  private static void kill(Process p) throws Exception {
    p.destroyForcibly();
    assertTrue(p.waitFor(30, TimeUnit.SECONDS));
  }

  @Test
  void aBuildKilledBeforeCommitLeavesNoImageAndGcCleansItsChunks() throws Exception {
    Path store = dir.resolve("store");
    Path progress = dir.resolve("progress");
    Process p = start("put-then-wait", store, progress);
    try {
      await(p, progress, s -> s.equals("put=20"));
    } finally {
      kill(p);
    }
    try (RocksChunkStore s = RocksChunkStore.open(store)) {
      assertEquals(List.of(), s.tags());
      assertEquals(20, s.chunkCount(), "synced chunks survive the kill");
      assertEquals(List.of(), s.verify());
      long packBytes = packBytes(store);
      ChunkStore.GarbageCollection gc = s.collectGarbage();
      assertEquals(20, gc.chunks());
      assertEquals(20 * 50_000, gc.bytes());
      assertEquals(packBytes, gc.diskBytes(), "the pack file it deleted");
      assertEquals(0, s.chunkCount());
    }
    assertEquals(0, packFiles(store), "gc gave the killed build's pack back");
  }

  /** Appended but never synced: the bytes are in a pack, no index names them, and gc deletes the pack. */
  @Test
  void aBuildKilledBeforeSyncLeavesNoChunkAndGcDeletesItsPack() throws Exception {
    Path store = dir.resolve("store");
    Path progress = dir.resolve("progress");
    Process p = start("put-no-sync", store, progress);
    try {
      await(p, progress, s -> s.equals("put=20"));
    } finally {
      kill(p);
    }
    assertEquals(1, packFiles(store), "the appended bytes are on disk");
    long packBytes = packBytes(store);
    assertTrue(packBytes >= 20 * 50_000, packBytes + " bytes in packs");
    try (RocksChunkStore s = RocksChunkStore.open(store)) {
      assertEquals(0, s.chunkCount(), "no index entry names bytes that were never forced");
      assertEquals(List.of(), s.verify());
      ChunkStore.GarbageCollection gc = s.collectGarbage();
      assertEquals(0, gc.chunks());
      assertEquals(packBytes, gc.diskBytes(), "the orphan pack is counted in what gc freed");
      assertEquals(new ChunkStore.GarbageCollection(0, 0, 0), s.collectGarbage(), "and only once");
    }
    assertEquals(0, packFiles(store));
  }

  private static long packBytes(Path store) throws Exception {
    try (var list = Files.list(store.resolve("packs"))) {
      long sum = 0;
      for (Path p : list.toList()) {
        sum += Files.size(p);
      }
      return sum;
    }
  }

  private static long packFiles(Path store) throws Exception {
    if (!Files.isDirectory(store.resolve("packs"))) {
      return 0;
    }
    try (var list = Files.list(store.resolve("packs"))) {
      return list.count();
    }
  }

  @Test
  void aBuildKilledWhileCommittingLeavesOnlyWholeImages() throws Exception {
    Path store = dir.resolve("store");
    Path progress = dir.resolve("progress");
    Process p = start("commit-forever", store, progress);
    int lastReported;
    try {
      String s = await(p, progress, line -> line.startsWith("committed=")
          && Integer.parseInt(line.substring("committed=".length())) >= 5);
      lastReported = Integer.parseInt(s.substring("committed=".length()));
    } finally {
      kill(p);
    }
    try (RocksChunkStore s = RocksChunkStore.open(store)) {
      List<String> tags = s.tags();
      assertTrue(tags.size() >= lastReported + 1, "every commit reported before the kill is durable: " + tags);
      for (String tag : tags) {
        int i = Integer.parseInt(tag.substring(2));
        assertArrayEquals(("manifest " + i).getBytes(StandardCharsets.UTF_8), s.manifest(tag).orElseThrow());
        List<Digest> chunks = s.chunksOf(tag).orElseThrow();
        assertEquals(4, chunks.size());
        for (Digest d : chunks) {
          s.readChunk(d, ByteBuffer.allocateDirect(40_000)); // present and verified
        }
      }
      assertEquals(List.of(), s.verify());
      long orphans = s.collectGarbage().chunks();
      // commit() flushes the in-flight build's chunks before writing its tag: a kill between leaves all four.
      assertTrue(orphans <= 4, "at most the chunks of the one build in flight: " + orphans);
      assertEquals(4L * tags.size(), s.chunkCount());
    }
  }

  @Test
  void aStoreHeldByAnotherProcessIsLockedButReadableReadOnly() throws Exception {
    Path store = dir.resolve("store");
    Path progress = dir.resolve("progress");
    Process p = start("hold", store, progress);
    try {
      await(p, progress, s -> s.equals("holding"));
      StoreLockedException e = assertThrows(StoreLockedException.class, () -> RocksChunkStore.open(store));
      assertEquals("store " + store + ": is in use by another process that writes to it (one writer at a time;"
          + " reading works meanwhile)", e.getMessage());
      try (RocksChunkStore ro = RocksChunkStore.open(new StoreOptions().setPath(store).setReadOnly(true))) {
        assertEquals(List.of("held"), ro.tags());
        Digest d = ro.chunksOf("held").orElseThrow().get(0);
        ByteBuffer dst = ByteBuffer.allocateDirect(100);
        assertEquals(10, ro.readChunk(d, dst));
      }
    } finally {
      kill(p);
    }
  }
}
