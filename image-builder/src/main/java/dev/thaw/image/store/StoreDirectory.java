package dev.thaw.image.store;

import dev.thaw.runtime.host.IoErrors;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.regex.Pattern;

/**
 * What is at a store's path, looked at before RocksDB touches it: RocksDB, asked to create a database where
 * {@code CURRENT} is gone, starts a new one and deletes every table and blob file it does not know. So the
 * store is created only where there is nothing, and anything else without a sound {@code CURRENT} is damage.
 */
final class StoreDirectory {

  private static final Pattern CURRENT = Pattern.compile("MANIFEST-[0-9]+\n?");

  private StoreDirectory() {}

  /**
   * True if a store is at {@code path}; false if there is nothing (no such path, or an empty directory).
   *
   * @throws StoreException if the path is not a directory, or a directory that holds a damaged store or
   *     something else; the message names what is wrong
   */
  static boolean exists(Path path) {
    if (!Files.exists(path)) {
      return false;
    }
    if (!Files.isDirectory(path)) {
      throw new StoreException(path, "is not a directory" + (Files.isRegularFile(path) ? " but a file" : ""));
    }
    List<String> names;
    try (var list = Files.list(path)) {
      names = list.map(p -> p.getFileName().toString()).sorted().toList();
    } catch (IOException e) {
      throw new StoreException(path, "cannot list the directory: " + IoErrors.describe(e), null, e);
    }
    if (names.isEmpty()) {
      return false;
    }
    Path current = path.resolve("CURRENT");
    if (!names.contains("CURRENT")) {
      throw new StoreException(path, "is damaged: its CURRENT file is missing, among " + names.size()
          + " other files (" + String.join(", ", names.subList(0, Math.min(4, names.size())))
          + (names.size() > 4 ? ", ..." : "") + "); nothing was changed. Restore CURRENT from a backup, or move"
          + " the directory away to start a new store");
    }
    String manifest;
    try {
      manifest = Files.size(current) > 256 ? "" : Files.readString(current, StandardCharsets.US_ASCII);
    } catch (IOException e) {
      throw new StoreException(path, "is damaged: cannot read CURRENT: " + IoErrors.describe(e), null, e);
    }
    if (!CURRENT.matcher(manifest).matches()) {
      throw new StoreException(path, "is damaged: CURRENT does not name a MANIFEST file; nothing was changed");
    }
    String name = manifest.strip();
    if (!Files.isRegularFile(path.resolve(name))) {
      throw new StoreException(path, "is damaged: CURRENT names " + name + ", which is missing; nothing was"
          + " changed");
    }
    return true;
  }
}
