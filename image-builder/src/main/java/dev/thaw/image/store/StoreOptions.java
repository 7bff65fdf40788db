package dev.thaw.image.store;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.file.Path;
import java.util.Map;

/** Where the store lives and how it is opened. */
public final class StoreOptions {

  /** The environment variable that overrides {@link #DEFAULT_PATH}. */
  public static final String ENV_STORE = "THAW_STORE";

  public static final Path DEFAULT_PATH = Path.of(System.getProperty("user.home"), ".thaw", "store");
  public static final boolean DEFAULT_READ_ONLY = false;
  /**
   * Create the store when there is none at the path (a missing or empty directory). Never over a directory that
   * holds anything else: that is a damaged store, or not a store. The CLI creates only for a build or an import.
   */
  public static final boolean DEFAULT_CREATE = true;
  /** Re-hash every chunk read: a corrupt chunk is named, never handed to a GPU. Cost: see image-store.md. */
  public static final boolean DEFAULT_VERIFY_READS = true;
  /** Re-hash every chunk stored: off, because the builder has just hashed it to name it. */
  public static final boolean DEFAULT_VERIFY_WRITES = false;
  /** Schema-1 stores: chunks from this size up are in blob files, out of the LSM tree. */
  public static final long DEFAULT_MIN_BLOB_SIZE = 4096;
  public static final long DEFAULT_BLOB_FILE_SIZE = 256L << 20;
  /**
   * Pack files (where chunk bytes go since schema 2) are started anew past this size. GC frees space a pack at a
   * time, rewriting a pack whose live chunks fill less than half of it: smaller packs free space sooner, larger
   * ones mean fewer files. 256 MiB: a GPT-2-large image is 6 packs.
   */
  public static final long DEFAULT_PACK_FILE_SIZE = 256L << 20;

  private Path path = DEFAULT_PATH;
  private boolean readOnly = DEFAULT_READ_ONLY;
  private boolean create = DEFAULT_CREATE;
  private boolean verifyReads = DEFAULT_VERIFY_READS;
  private boolean verifyWrites = DEFAULT_VERIFY_WRITES;
  private long minBlobSize = DEFAULT_MIN_BLOB_SIZE;
  private long blobFileSize = DEFAULT_BLOB_FILE_SIZE;
  private long packFileSize = DEFAULT_PACK_FILE_SIZE;

  public StoreOptions() {}

  public StoreOptions(StoreOptions o) {
    path = o.path;
    readOnly = o.readOnly;
    create = o.create;
    verifyReads = o.verifyReads;
    verifyWrites = o.verifyWrites;
    minBlobSize = o.minBlobSize;
    blobFileSize = o.blobFileSize;
    packFileSize = o.packFileSize;
  }

  /** Defaults, with the path from {@code THAW_STORE} when it is set and not blank. */
  public static StoreOptions fromEnvironment() {
    return fromEnvironment(System.getenv());
  }

  static StoreOptions fromEnvironment(Map<String, String> env) {
    StoreOptions o = new StoreOptions();
    String p = env.get(ENV_STORE);
    if (p != null && !p.isBlank()) {
      o.setPath(Path.of(p));
    }
    return o;
  }

  public Path path() {
    return path;
  }

  public StoreOptions setPath(Path path) {
    this.path = path.toAbsolutePath().normalize();
    return this;
  }

  public boolean readOnly() {
    return readOnly;
  }

  /**
   * Opens with RocksDB's read-only mode: no lock is taken and nothing is written, so it works while another
   * process writes, and on a store the user may not write to. It sees what was committed up to the open.
   */
  public StoreOptions setReadOnly(boolean readOnly) {
    this.readOnly = readOnly;
    return this;
  }

  /** Whether a writable open creates the store when there is none; a read-only open never does. */
  public boolean create() {
    return create;
  }

  public StoreOptions setCreate(boolean create) {
    this.create = create;
    return this;
  }

  public boolean verifyReads() {
    return verifyReads;
  }

  public StoreOptions setVerifyReads(boolean verifyReads) {
    this.verifyReads = verifyReads;
    return this;
  }

  public boolean verifyWrites() {
    return verifyWrites;
  }

  public StoreOptions setVerifyWrites(boolean verifyWrites) {
    this.verifyWrites = verifyWrites;
    return this;
  }

  public long minBlobSize() {
    return minBlobSize;
  }

  public StoreOptions setMinBlobSize(long minBlobSize) {
    this.minBlobSize = minBlobSize;
    return this;
  }

  public long blobFileSize() {
    return blobFileSize;
  }

  public StoreOptions setBlobFileSize(long blobFileSize) {
    this.blobFileSize = blobFileSize;
    return this;
  }

  public long packFileSize() {
    return packFileSize;
  }

  public StoreOptions setPackFileSize(long packFileSize) {
    if (packFileSize < 1) {
      throw new IllegalArgumentException("packFileSize must be positive, not " + packFileSize);
    }
    this.packFileSize = packFileSize;
    return this;
  }

  public ObjectNode toJson() {
    ObjectNode n = new ObjectMapper().createObjectNode();
    n.put("path", path.toString());
    n.put("readOnly", readOnly);
    n.put("create", create);
    n.put("verifyReads", verifyReads);
    n.put("verifyWrites", verifyWrites);
    n.put("minBlobSize", minBlobSize);
    n.put("blobFileSize", blobFileSize);
    n.put("packFileSize", packFileSize);
    return n;
  }

  @Override
  public String toString() {
    return toJson().toString();
  }
}
