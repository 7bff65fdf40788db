package dev.thaw.image.store;

import dev.thaw.runtime.host.Threads;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.regex.Pattern;
import org.rocksdb.RocksDB;

/**
 * Loads RocksDB's native library, then removes the copy RocksDB extracted for this process. RocksDB's JNI loader
 * writes its 15 MB library to a fresh temporary file per process ({@code librocksdbjni<digits>.so} in the temporary
 * folder) and asks the JVM to delete it at exit; a process that ends any other way (a pool worker halts, a
 * container is killed) leaves it behind: 4,478 of them, 67 GB of /tmp, on a machine that had run the tests for a
 * day. Once loaded, the library is mapped, so its file can go at once (Linux keeps the mapping).
 */
public final class RocksNative {

  /** The name RocksDB's loader gives its temporary copy: a number between prefix and suffix. */
  private static final Pattern EXTRACTED = Pattern.compile("librocksdbjni[0-9]+\\.so");

  private RocksNative() {}

  /**
   * Loads the library on a thread of its own, now, for a process that will open a store soon (a server, a pool
   * worker): RocksDB's loader copies 15 MB out of its jar first, most of a store's opening. The thread initialises {@link RocksChunkStore}, so an open that comes meanwhile waits for it, not twice.
   */
  public static void loadAhead() {
    Threads.startDaemon(() -> {
      try {
        Class.forName(RocksChunkStore.class.getName(), true, RocksNative.class.getClassLoader());
      } catch (ClassNotFoundException | LinkageError | RuntimeException e) {
        // The store's own opening fails with the reason.
      }
    }, "thaw-rocksdb-load");
  }

  static void load() {
    RocksDB.loadLibrary();
    removeExtractedCopy(Path.of("/proc/self/maps"));
  }

  /**
   * Deletes the temporary copies of the library that {@code maps} (a {@code /proc/PID/maps}) shows this process
   * mapped; nothing where there is no such file (not Linux) or the library came from a library path.
   *
   * @return the files deleted
   */
  static List<Path> removeExtractedCopy(Path maps) {
    List<String> lines;
    try {
      lines = Files.readAllLines(maps);
    } catch (IOException | RuntimeException e) {
      return List.of();
    }
    return lines.stream().map(l -> l.indexOf('/') >= 0 ? l.substring(l.indexOf('/')) : "")
        .filter(p -> !p.isEmpty() && !p.endsWith(" (deleted)"))
        .map(Path::of).filter(p -> p.getFileName() != null && EXTRACTED.matcher(p.getFileName().toString()).matches())
        .distinct().filter(RocksNative::delete).toList();
  }

  private static boolean delete(Path p) {
    try {
      return Files.deleteIfExists(p);
    } catch (IOException | RuntimeException e) {
      return false;
    }
  }
}
