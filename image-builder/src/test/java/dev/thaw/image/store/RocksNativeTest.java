package dev.thaw.image.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** RocksDB's extracted native library goes once it is mapped; a library that was not extracted stays. */
class RocksNativeTest {

  @TempDir
  Path dir;

  @Test
  void onlyTheTemporaryCopyThisProcessMappedIsDeleted() throws Exception {
    Path extracted = Files.writeString(dir.resolve("librocksdbjni8812734.so"), "elf");
    Path shipped = Files.writeString(dir.resolve("librocksdbjni-linux64.so"), "elf");
    Path other = Files.writeString(dir.resolve("librocksdbjni999.so"), "elf");
    Path maps = Files.writeString(dir.resolve("maps"), String.join("\n",
        "7f00-7f10 r-xp 00000000 fd:00 123 " + extracted,
        "7f10-7f20 r--p 00010000 fd:00 123 " + extracted,
        "7f20-7f30 r-xp 00000000 fd:00 124 " + shipped,
        "7f30-7f40 rw-p 00000000 00:00 0 [heap]",
        "7f40-7f50 r-xp 00000000 fd:00 125 /tmp/librocksdbjni4242.so (deleted)", ""));
    assertEquals(List.of(extracted), RocksNative.removeExtractedCopy(maps));
    assertFalse(Files.exists(extracted));
    assertTrue(Files.exists(shipped), "a library from a library path is not ours to delete");
    assertTrue(Files.exists(other), "another process's copy is not in our maps");
    assertEquals(List.of(), RocksNative.removeExtractedCopy(dir.resolve("no-such-maps")));
  }

  @Test
  void thisProcessKeepsNoExtractedCopyOnDisk() throws Exception {
    Path maps = Path.of("/proc/self/maps");
    Assumptions.assumeTrue(Files.isReadable(maps), "no /proc here");
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(dir.resolve("store")))) {
      List<String> live = Files.readAllLines(maps).stream()
          .filter(l -> l.contains("librocksdbjni") && !l.endsWith("(deleted)")).toList();
      assertTrue(live.stream().noneMatch(l -> l.matches(".*/librocksdbjni[0-9]+\\.so$")),
          "the library is mapped from a deleted file: " + live);
    }
  }

  @Test
  void aStoreOpensWhileTheLibraryLoadsAheadOnItsThread() throws Exception {
    RocksNative.loadAhead();
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(dir.resolve("ahead")))) {
      assertTrue(store.verify().isEmpty(), "an empty store opened and verified");
    }
  }
}
