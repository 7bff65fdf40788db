package dev.thaw.cli;

import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.List;

/** Damage done to a real store's files behind its back, as a disk would. */
final class StoreFiles {

  private StoreFiles() {}

  /** Flips one byte in the middle of the chunk's bytes wherever they lie on disk; fails if they are nowhere. */
  static void corrupt(Path store, Digest chunk) throws Exception {
    byte[] bytes;
    try (RocksChunkStore s = RocksChunkStore.open(new StoreOptions().setPath(store).setReadOnly(true))) {
      ByteBuffer b = ByteBuffer.allocate(s.chunkSize(chunk).orElseThrow());
      s.readChunk(chunk, b);
      bytes = b.array();
    }
    List<Path> files;
    try (var walk = Files.walk(store)) {
      files = walk.filter(Files::isRegularFile).toList();
    }
    for (Path f : files) {
      byte[] all = Files.readAllBytes(f);
      int at = indexOf(all, bytes);
      if (at >= 0) {
        try (FileChannel ch = FileChannel.open(f, StandardOpenOption.WRITE)) {
          ch.write(ByteBuffer.wrap(new byte[] {(byte) (all[at + bytes.length / 2] ^ 0x40)}),
              at + bytes.length / 2);
        }
        return;
      }
    }
    throw new AssertionError("chunk " + chunk + " is in no file of " + store);
  }

  private static int indexOf(byte[] hay, byte[] needle) {
    outer:
    for (int i = 0; i + needle.length <= hay.length; i++) {
      for (int j = 0; j < Math.min(64, needle.length); j++) {
        if (hay[i + j] != needle[j]) {
          continue outer;
        }
      }
      if (Arrays.equals(hay, i, i + needle.length, needle, 0, needle.length)) {
        return i;
      }
    }
    return -1;
  }
}
