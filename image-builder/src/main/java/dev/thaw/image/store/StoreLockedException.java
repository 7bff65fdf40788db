package dev.thaw.image.store;

import java.nio.file.Path;

/**
 * The store is opened for writing by another process (or already by this one): one writer at a time.
 * Open it {@linkplain StoreOptions#setReadOnly read-only} to read while the other writes.
 */
public class StoreLockedException extends StoreException {

  public StoreLockedException(Path path, Throwable cause) {
    super(path, "is in use by another process that writes to it (one writer at a time; reading works meanwhile)",
        null, cause);
  }
}
