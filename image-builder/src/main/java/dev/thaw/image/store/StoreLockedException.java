package dev.thaw.image.store;

import java.nio.file.Path;

/**
 * The store is opened for writing by another process (or already by this one): one writer at a time.
 * Open it {@linkplain StoreOptions#setReadOnly read-only} to read while the other writes.
 */
public class StoreLockedException extends StoreException {

  public StoreLockedException(Path path, Throwable cause) {
    super(path, "the store at " + path + " is in use by another process; open it read-only to read it meanwhile",
        null, cause);
  }
}
