package dev.thaw.pool.worker;

import dev.thaw.image.restore.ImageRestoreException;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.protocol.WorkerMessages.Source;
import java.nio.file.Path;
import java.util.Arrays;

/**
 * The store a worker reads images from: the one opened read-only at start while it serves, else one opened now.
 * A read-only store sees what was committed when it was opened, so the open one serves an image only when it holds
 * that image's manifest, byte for byte (then it holds all its chunks: a commit names only chunks already stored).
 * Executing thread only.
 */
final class WorkerStores {

  private final String defaultPath;
  private RocksChunkStore open;

  WorkerStores(String defaultPath, RocksChunkStore openedAtStart) {
    this.defaultPath = defaultPath;
    this.open = openedAtStart;
  }

  /** The store open now, or null. */
  RocksChunkStore current() {
    return open;
  }

  /** The store that holds {@code manifest} as {@code name}, at the source's path (the start's store by default). */
  RocksChunkStore storeFor(Source source, String name, byte[] manifest) {
    String kind = source == null ? "store" : source.kind();
    if (!kind.equals("store") && !kind.equals("cache")) {
      throw new ImageRestoreException("image source '" + kind + "' is not one this worker reads", null);
    }
    String where = source != null && source.path() != null ? source.path() : defaultPath == null ? "" : defaultPath;
    Path path = Path.of(where).toAbsolutePath().normalize();
    if (open != null && open.path().equals(path)
        && open.manifest(name).map(m -> Arrays.equals(m, manifest)).orElse(false)) {
      return open;
    }
    if (open != null) {
      open.close();
    }
    open = RocksChunkStore.open(new StoreOptions().setPath(path).setReadOnly(true));
    return open;
  }
}
