package dev.thaw.image.store;

import dev.thaw.runtime.host.IoErrors;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.Supplier;
import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.BloomFilter;
import org.rocksdb.ColumnFamilyDescriptor;
import org.rocksdb.ColumnFamilyHandle;
import org.rocksdb.ColumnFamilyOptions;
import org.rocksdb.CompressionType;
import org.rocksdb.DBOptions;
import org.rocksdb.FlushOptions;
import org.rocksdb.Options;
import org.rocksdb.ReadOptions;
import org.rocksdb.RocksDB;
import org.rocksdb.RocksDBException;
import org.rocksdb.RocksIterator;
import org.rocksdb.Status;
import org.rocksdb.WriteBatch;
import org.rocksdb.WriteOptions;

/**
 * The {@link ChunkStore} on an embedded RocksDB. Layout, commit protocol, GC and durability: {@code
 * docs/image-store.md}.
 *
 * <p>One process opens a store for writing (RocksDB's {@code LOCK} file; a second gets {@link
 * StoreLockedException}); any number may open it {@linkplain StoreOptions#setReadOnly read-only} meanwhile
 * (RocksDB's read-only mode: no lock, nothing written; it sees the store as it was at the open).
 * Garbage collection protects the chunks this instance stored that no commit has named yet (its <em>pending
 * set</em>), so a build running in this process keeps its chunks; a build in another process cannot exist,
 * because the writer lock is per process.
 */
public final class RocksChunkStore implements ChunkStore {

  static {
    RocksNative.load();
  }

  /**
   * Bumped when the layout below changes; a store written by a newer layout is refused. 1: chunk bytes in the
   * {@code chunks} family's blob files. 2: new chunks in pack files, indexed by {@code chunk-packs}; a schema-1
   * store is read as it is and becomes schema 2 at its first writable open (its chunks stay where they are).
   */
  public static final int SCHEMA_VERSION = 2;

  static final String CF_CHUNKS = "chunks";
  static final String CF_CHUNK_SIZES = "chunk-sizes";
  static final String CF_MANIFESTS = "manifests";
  static final String CF_REFS = "refs";
  static final String CF_TAGS = "tags";
  static final String CF_META = "meta";
  static final String CF_CHUNK_PACKS = "chunk-packs";
  private static final List<String> FAMILIES =
      List.of(CF_CHUNKS, CF_CHUNK_SIZES, CF_MANIFESTS, CF_REFS, CF_TAGS, CF_META, CF_CHUNK_PACKS);
  private static final byte[] META_SCHEMA = bytes("schema-version");
  private static final byte[] META_NEXT_PACK = bytes("next-pack");
  /** A pack whose live bytes fall under this share of its size is rewritten by GC. */
  static final double COMPACT_BELOW = 0.5;
  private static final int KEPT_INFO_LOGS = 3;
  private static final long MAX_INFO_LOG_BYTES = 4L << 20;

  private final StoreOptions options;
  private final Path path;
  /** Native objects in creation order; closed in reverse. */
  private final List<AutoCloseable> resources = new ArrayList<>();
  private final RocksDB db;
  private final ColumnFamilyHandle chunks;
  private final ColumnFamilyHandle chunkSizes;
  private final ColumnFamilyHandle manifests;
  private final ColumnFamilyHandle refs;
  private final ColumnFamilyHandle tags;
  private final ColumnFamilyHandle meta;
  /** Null only in a schema-1 store opened read-only, which has no packs. */
  private final ColumnFamilyHandle chunkPacks;
  private final WriteOptions sync;
  private final ReadOptions read;
  private final ReadOptions scan;
  private final AtomicBoolean open = new AtomicBoolean(true);

  /** Chunks put and not yet named by a commit: never collected. Keys are raw 32-byte digests. */
  private final Set<ByteBuffer> pending = ConcurrentHashMap.newKeySet();
  /**
   * Chunks appended to a pack whose index entries {@link #sync()} has not written yet. The index reaches RocksDB
   * only after the pack bytes are forced, so no crash leaves an entry naming bytes that are not on disk.
   */
  private final Map<ByteBuffer, PackFiles.Location> unsynced = new ConcurrentHashMap<>();
  private final PackFiles packs;
  /** One sync at a time: its snapshot of {@link #unsynced}, the force and the index write go together. */
  private final Object syncLock = new Object();
  /** Puts hold it shared; GC's sweep holds it exclusively, so a put can't slip between GC's check and delete. */
  private final ReentrantReadWriteLock sweepLock = new ReentrantReadWriteLock();
  /** Commits, deletes and GC run one at a time. */
  private final Object catalogLock = new Object();

  private static final ThreadLocal<ByteBuffer> KEY =
      ThreadLocal.withInitial(() -> ByteBuffer.allocateDirect(32));

  private RocksChunkStore(StoreOptions options) {
    this.options = new StoreOptions(options);
    this.path = options.path();
    try {
      int cores = Runtime.getRuntime().availableProcessors();
      DBOptions dbOptions = track(new DBOptions().setMaxBackgroundJobs(Math.max(2, Math.min(8, cores))));
      dbOptions.setMaxBackgroundFlushes(Math.max(1, Math.min(4, cores / 2)));
      // Each open writes an info log of ~120 KB and rotates the last one aside: keep a few, not every one.
      dbOptions.setKeepLogFileNum(KEPT_INFO_LOGS).setMaxLogFileSize(MAX_INFO_LOG_BYTES);
      boolean exists = StoreDirectory.exists(path);
      List<String> present = new ArrayList<>(FAMILIES);
      if (exists) {
        try (Options o = new Options()) {
          present = RocksDB.listColumnFamilies(o, path.toString()).stream().map(RocksChunkStore::string).toList();
        }
        for (String name : FAMILIES) {
          if (!present.contains(name) && !name.equals(CF_CHUNK_PACKS)) {
            throw new StoreException(path, "is damaged: it has no column family " + name + "; nothing was changed");
          }
        }
      }
      // A schema-1 store has no chunk-packs: read-only, go without it; writable, create it (the migration).
      boolean withPacks = !options.readOnly() || present.contains(CF_CHUNK_PACKS);
      List<ColumnFamilyDescriptor> descriptors = new ArrayList<>();
      descriptors.add(new ColumnFamilyDescriptor(RocksDB.DEFAULT_COLUMN_FAMILY, track(new ColumnFamilyOptions())));
      for (String name : FAMILIES) {
        if (withPacks || !name.equals(CF_CHUNK_PACKS)) {
          descriptors.add(new ColumnFamilyDescriptor(bytes(name), familyOptions(name)));
        }
      }
      List<ColumnFamilyHandle> handles = new ArrayList<>();
      if (options.readOnly()) {
        if (!exists) {
          throw new StoreException(path, "there is no store here");
        }
        // RocksDB's read-only mode takes no lock and writes nothing, not even an info log.
        db = RocksDB.openReadOnly(dbOptions, path.toString(), descriptors, handles);
      } else {
        if (!exists && !options.create()) {
          throw new StoreException(path, "there is no store here");
        }
        if (exists && !Files.isWritable(path)) {
          throw new StoreException(path, "is read-only: no permission to write to it");
        }
        if (!exists) {
          try {
            Files.createDirectories(path);
          } catch (IOException e) {
            throw new StoreException(path, "cannot create the store: " + IoErrors.describe(e), null, e);
          }
        }
        dbOptions.setCreateIfMissing(!exists).setCreateMissingColumnFamilies(true);
        db = RocksDB.open(dbOptions, path.toString(), descriptors, handles);
      }
      // Handles close before the DB, the DB before the options it was opened with.
      resources.add(db);
      resources.addAll(handles);
      chunks = handles.get(1);
      chunkSizes = handles.get(2);
      manifests = handles.get(3);
      refs = handles.get(4);
      tags = handles.get(5);
      meta = handles.get(6);
      chunkPacks = withPacks ? handles.get(7) : null;
      sync = track(new WriteOptions().setSync(true));
      read = track(new ReadOptions());
      scan = track(new ReadOptions().setFillCache(false));
      checkSchema();
      packs = new PackFiles(path, options.readOnly(), options.packFileSize(), this::newPackId);
    } catch (RocksDBException e) {
      closeResources();
      if (e.getStatus() != null && e.getStatus().getCode() == Status.Code.IOError
          && String.valueOf(e.getMessage()).contains("LOCK")) {
        throw new StoreLockedException(path, e);
      }
      if (e.getStatus() != null && e.getStatus().getCode() == Status.Code.Corruption) {
        throw error("is damaged", e);
      }
      throw error("cannot open", e);
    } catch (RuntimeException e) {
      closeResources();
      throw e;
    }
  }

  /**
   * Opens the store {@code options} names: read-only, or for writing, creating it where there is nothing when
   * {@link StoreOptions#create()} says so. A path that holds anything but a sound store fails, unchanged.
   *
   * @throws StoreException naming the path and what is wrong: no store, not a directory, damaged, read-only
   * @throws StoreLockedException if another process has it open for writing
   */
  public static RocksChunkStore open(StoreOptions options) {
    return options.readOnly() ? openBesideWriter(() -> new RocksChunkStore(options)) : new RocksChunkStore(options);
  }

  /** How many times a read-only open is tried when a file it listed vanished before it was read. */
  static final int READ_ONLY_OPEN_ATTEMPTS = 10;

  /**
   * A read-only open beside the process that writes the store (a pool worker's beside the server's): the open lists
   * the store's files, then reads them, and the writer may rotate its log or manifest, or compact table files away, in
   * between — the file is gone ("No such file or directory") and an open a moment later sees the new ones. Tried
   * {@link #READ_ONLY_OPEN_ATTEMPTS} times, 10, 20, ... 90 ms apart (a worker start, not a cold start, waits for it);
   * any other failure at once.
   */
  static <T> T openBesideWriter(Supplier<T> open) {
    for (int attempt = 1; ; attempt++) {
      try {
        return open.get();
      } catch (StoreException e) {
        if (attempt >= READ_ONLY_OPEN_ATTEMPTS || !vanishedFile(e)) {
          throw e;
        }
        try {
          Thread.sleep(10L * attempt);
        } catch (InterruptedException interrupted) {
          Thread.currentThread().interrupt();
          throw e;
        }
      }
    }
  }

  /** True when {@code e} says a file of the store was gone when RocksDB went to read it. */
  static boolean vanishedFile(StoreException e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      // IOError when the file was gone at its stat; Corruption when a table file the manifest names was compacted
      // away before it was opened (a store whose file is really lost says so again on the last attempt).
      if (t instanceof RocksDBException r && r.getStatus() != null
          && (r.getStatus().getCode() == Status.Code.IOError || r.getStatus().getCode() == Status.Code.Corruption)
          && String.valueOf(r.getMessage()).contains("No such file or directory")) {
        return true;
      }
    }
    return false;
  }

  /** Opens the store at {@code path} for writing (creating it where there is nothing), with default options. */
  public static RocksChunkStore open(Path path) {
    return open(new StoreOptions().setPath(path));
  }

  public Path path() {
    return path;
  }

  public StoreOptions options() {
    return new StoreOptions(options);
  }

  private ColumnFamilyOptions familyOptions(String name) {
    ColumnFamilyOptions cf = track(new ColumnFamilyOptions());
    BlockBasedTableConfig table = new BlockBasedTableConfig().setFilterPolicy(track(new BloomFilter(10)));
    cf.setTableFormatConfig(table);
    if (name.equals(CF_CHUNKS)) {
      // Weights are high-entropy: compressing them costs CPU and saves nothing. Blob files keep them out
      // of the LSM tree, so compaction moves 32-byte keys and blob references, not megabytes.
      cf.setCompressionType(CompressionType.NO_COMPRESSION)
          .setEnableBlobFiles(true)
          .setMinBlobSize(options.minBlobSize())
          .setBlobFileSize(options.blobFileSize())
          .setBlobCompressionType(CompressionType.NO_COMPRESSION)
          .setEnableBlobGarbageCollection(true);
    }
    return cf;
  }

  private <T extends AutoCloseable> T track(T resource) {
    resources.add(resource);
    return resource;
  }

  private void checkSchema() throws RocksDBException {
    byte[] v = db.get(meta, META_SCHEMA);
    if (v == null) {
      if (!options.readOnly()) {
        db.put(meta, sync, META_SCHEMA, intBytes(SCHEMA_VERSION));
      }
      return;
    }
    int found = ByteBuffer.wrap(v).getInt();
    if (found > SCHEMA_VERSION) {
      throw new StoreException(path, "written by a newer Thaw (schema " + found + ", this one reads up to "
          + SCHEMA_VERSION + ")");
    }
    if (found < SCHEMA_VERSION && !options.readOnly()) {
      // Schema 1 -> 2 adds chunk-packs (created at the open); a schema-1 Thaw must not write here any more.
      db.put(meta, sync, META_SCHEMA, intBytes(SCHEMA_VERSION));
    }
  }

  // ---------------------------------------------------------------------------------------------- chunks

  @Override
  public boolean contains(Digest digest) {
    return chunkSize(digest).isPresent();
  }

  @Override
  public Optional<Integer> chunkSize(Digest digest) {
    checkOpen();
    byte[] key = digest.toBytes();
    PackFiles.Location at = unsynced.get(ByteBuffer.wrap(key));
    if (at != null) {
      return Optional.of(at.length());
    }
    try {
      byte[] v = db.get(chunkSizes, read, key);
      return v == null ? Optional.empty() : Optional.of(ByteBuffer.wrap(v).getInt());
    } catch (RocksDBException e) {
      throw error("cannot read the size of " + digest, e);
    }
  }

  /**
   * {@inheritDoc}
   *
   * <p>The bytes are appended to the active pack file with one positional write (a direct {@code data} goes to
   * the kernel as it is); the chunk is then found by this instance at once and by the store after {@link
   * #sync()}, which forces the packs and only then writes the index.
   */
  @Override
  public void putChunk(Digest digest, ByteBuffer data) {
    checkWritable();
    if (options.verifyWrites()) {
      Digest actual = Digest.of(data.duplicate());
      if (!actual.equals(digest)) {
        throw new IllegalArgumentException("chunk named " + digest + " hashes to " + actual);
      }
    }
    byte[] key = digest.toBytes();
    ByteBuffer k = ByteBuffer.wrap(key);
    sweepLock.readLock().lock();
    try {
      // Pending before the presence check: a chunk found present is protected from GC all the same.
      pending.add(k);
      if (unsynced.containsKey(k) || db.get(chunkSizes, read, key) != null) {
        return;
      }
      // Two threads putting the same new chunk both append; the first entry wins and the other copy is dead
      // bytes that GC's pack compaction reclaims.
      unsynced.putIfAbsent(k, packs.append(data.duplicate()));
    } catch (RocksDBException e) {
      throw error("cannot store chunk " + digest, e);
    } catch (IOException e) {
      throw new StoreException(path, "cannot store chunk " + digest + ": " + IoErrors.describe(e), null, e);
    } finally {
      sweepLock.readLock().unlock();
    }
  }

  /**
   * {@inheritDoc}
   *
   * <p>Forces every pack file written since the last sync (a background thread has been forcing them as they
   * grew, so this is mostly the tail), then writes the index entries of the chunks put since, in one synced
   * batch: an index entry is never durable before the bytes it names.
   */
  @Override
  public void sync() {
    checkWritable();
    synchronized (syncLock) {
      // Entries appear in unsynced only after their bytes are written: the snapshot's bytes are all forced below.
      Map<ByteBuffer, PackFiles.Location> batch = new HashMap<>(unsynced);
      try {
        packs.force();
        if (batch.isEmpty()) {
          return;
        }
        try (WriteBatch wb = new WriteBatch()) {
          for (Map.Entry<ByteBuffer, PackFiles.Location> e : batch.entrySet()) {
            byte[] key = e.getKey().array();
            wb.put(chunkSizes, key, intBytes(e.getValue().length()));
            wb.put(chunkPacks, key, e.getValue().toBytes());
          }
          db.write(sync, wb);
        }
      } catch (IOException e) {
        throw new StoreException(path, "cannot make the chunks durable: " + IoErrors.describe(e), null, e);
      } catch (RocksDBException e) {
        throw error("cannot make the chunks durable", e);
      }
      batch.forEach(unsynced::remove);
    }
  }

  /** Where a chunk's bytes are in the packs, or null if it is a schema-1 chunk (or not stored). */
  private PackFiles.Location location(byte[] key) throws RocksDBException {
    PackFiles.Location at = unsynced.get(ByteBuffer.wrap(key));
    if (at != null || chunkPacks == null) {
      return at;
    }
    byte[] v = db.get(chunkPacks, read, key);
    return v == null ? null : PackFiles.Location.of(v);
  }

  /**
   * {@inheritDoc}
   *
   * <p>A chunk in a pack file is read with one positional read into {@code dst} (direct or heap); a schema-1
   * chunk through RocksDB's {@code get} (direct {@code dst}: no copy on the Java side). When {@link
   * StoreOptions#verifyReads()} is on, the bytes are re-hashed before the position moves. If the chunk does not
   * fit, the bytes from {@code dst}'s position to its limit may have been overwritten with a prefix of it; its
   * position and limit are unchanged.
   *
   * @throws ChunkHashMismatchException if verifying and the bytes don't hash to {@code digest} (position unchanged)
   * @throws StoreException if the chunk cannot be read (its pack file missing or short: the store is damaged)
   */
  @Override
  public int readChunk(Digest digest, ByteBuffer dst) {
    return read(digest, dst, options.verifyReads());
  }

  /** {@link #readChunk} without the re-hash, whatever {@link StoreOptions#verifyReads()} says. */
  @Override
  public int readChunkUnchecked(Digest digest, ByteBuffer dst) {
    return read(digest, dst, false);
  }

  private int read(Digest digest, ByteBuffer dst, boolean verify) {
    checkOpen();
    int n;
    try {
      byte[] key = digest.toBytes();
      PackFiles.Location at = location(key);
      if (at != null) {
        if (at.length() > dst.remaining()) {
          throw new IllegalArgumentException(
              "chunk " + digest + " has " + at.length() + " bytes; the buffer has room for " + dst.remaining());
        }
        n = packs.read(at, dst);
      } else {
        n = readLegacy(key, dst);
        if (n == RocksDB.NOT_FOUND) {
          throw new ChunkNotFoundException(digest);
        }
      }
    } catch (RocksDBException e) {
      throw error(corruption(e) ? "chunk " + digest + " is damaged" : "cannot read chunk " + digest, e);
    } catch (NoSuchFileException e) {
      throw new StoreException(path, "chunk " + digest + " is damaged: its pack file "
          + path.relativize(Path.of(e.getFile())) + " is missing", null, e);
    } catch (IOException e) {
      throw new StoreException(path, "chunk " + digest + " is damaged: " + IoErrors.describe(e), null, e);
    }
    if (n > dst.remaining()) {
      throw new IllegalArgumentException(
          "chunk " + digest + " has " + n + " bytes; the buffer has room for " + dst.remaining());
    }
    if (verify) {
      checkDigest(digest, dst.slice().limit(n));
    }
    dst.position(dst.position() + n);
    return n;
  }

  /** A schema-1 chunk, from the {@code chunks} family; its size, or {@link RocksDB#NOT_FOUND}. */
  private int readLegacy(byte[] key, ByteBuffer dst) throws RocksDBException {
    if (dst.isDirect()) {
      ByteBuffer k = KEY.get().clear().put(key).flip();
      // RocksDB moves the key's position to its limit and sets the value's limit to the bytes it wrote:
      // it gets a slice, so dst's own position and limit stay ours.
      return db.get(chunks, read, k, dst.slice());
    }
    return db.get(chunks, read, key, 0, key.length, dst.array(), dst.arrayOffset() + dst.position(),
        dst.remaining());
  }

  private void checkDigest(Digest digest, ByteBuffer bytes) {
    Digest actual = Digest.of(bytes);
    if (!actual.equals(digest)) {
      throw new ChunkHashMismatchException(path, digest, actual);
    }
  }

  // ------------------------------------------------------------------------------------------- catalog

  @Override
  public void commit(String tag, byte[] manifest, Set<Digest> chunkSet) {
    Tags.check(tag);
    checkWritable();
    Digest manifestDigest = Digest.of(manifest);
    byte[] md = manifestDigest.toBytes();
    TreeSet<Digest> sorted = new TreeSet<>(chunkSet);
    ByteBuffer packed = ByteBuffer.allocate(32 * sorted.size());
    // Make the chunks durable and indexed before a manifest can name them (a no-op after sync()).
    sync();
    synchronized (catalogLock) {
      try {
        for (Digest d : sorted) {
          byte[] key = d.toBytes();
          if (db.get(chunkSizes, read, key) == null) {
            throw new ChunkNotFoundException(d);
          }
          packed.put(key);
        }
        byte[] committed = db.get(refs, read, md);
        if (committed != null && !Arrays.equals(committed, packed.array())) {
          // GC reads reachability from refs alone: replacing the list would orphan chunks another tag needs.
          throw new StoreException(path, "manifest " + manifestDigest + " is already committed with another chunk"
              + " list (" + committed.length / 32 + " chunks; this commit names " + sorted.size() + "): refused");
        }
        try (WriteBatch batch = new WriteBatch()) {
          byte[] previous = db.get(tags, read, bytes(tag));
          if (previous != null && !Arrays.equals(previous, md) && !sharedByAnotherTag(tag, previous)) {
            batch.delete(manifests, previous);
            batch.delete(refs, previous);
          }
          batch.put(manifests, md, manifest);
          batch.put(refs, md, packed.array());
          batch.put(tags, bytes(tag), md);
          // One synced write: the WAL is sequential, so syncing it also makes every chunk put before durable.
          db.write(sync, batch);
        }
      } catch (RocksDBException e) {
        throw error("cannot commit " + tag, e);
      }
      for (Digest d : sorted) {
        pending.remove(ByteBuffer.wrap(d.toBytes()));
      }
    }
  }

  private boolean sharedByAnotherTag(String tag, byte[] manifestDigest) {
    try (RocksIterator it = db.newIterator(tags, read)) {
      for (it.seekToFirst(); it.isValid(); it.next()) {
        if (Arrays.equals(it.value(), manifestDigest) && !tag.equals(string(it.key()))) {
          return true;
        }
      }
      return false;
    }
  }

  @Override
  public Optional<byte[]> manifest(String tag) {
    checkOpen();
    try {
      byte[] md = db.get(tags, read, bytes(tag));
      return md == null ? Optional.empty() : Optional.ofNullable(db.get(manifests, read, md));
    } catch (RocksDBException e) {
      throw error("cannot read the manifest of " + tag, e);
    }
  }

  /** The digest of the manifest a tag points at. */
  public Optional<Digest> manifestDigest(String tag) {
    checkOpen();
    try {
      byte[] md = db.get(tags, read, bytes(tag));
      return md == null ? Optional.empty() : Optional.of(Digest.fromBytes(md));
    } catch (RocksDBException e) {
      throw error("cannot read tag " + tag, e);
    }
  }

  /** The chunks the manifest a tag points at names, as recorded at commit; sorted. */
  public Optional<List<Digest>> chunksOf(String tag) {
    checkOpen();
    try {
      byte[] md = db.get(tags, read, bytes(tag));
      if (md == null) {
        return Optional.empty();
      }
      byte[] packed = db.get(refs, read, md);
      if (packed == null) {
        throw new StoreException(path, "tag " + tag + " has no chunk list: the store is inconsistent");
      }
      List<Digest> out = new ArrayList<>(packed.length / 32);
      for (int i = 0; i < packed.length; i += 32) {
        out.add(Digest.fromBytes(Arrays.copyOfRange(packed, i, i + 32)));
      }
      return Optional.of(out);
    } catch (RocksDBException e) {
      throw error("cannot read the chunks of " + tag, e);
    }
  }

  @Override
  public List<String> tags() {
    checkOpen();
    List<String> out = new ArrayList<>();
    try (RocksIterator it = db.newIterator(tags, read)) {
      for (it.seekToFirst(); it.isValid(); it.next()) {
        out.add(string(it.key()));
      }
      status(it, "cannot list tags");
    }
    Collections.sort(out);
    return out;
  }

  @Override
  public boolean delete(String tag) {
    checkWritable();
    synchronized (catalogLock) {
      try {
        byte[] md = db.get(tags, read, bytes(tag));
        if (md == null) {
          return false;
        }
        try (WriteBatch batch = new WriteBatch()) {
          batch.delete(tags, bytes(tag));
          if (!sharedByAnotherTag(tag, md)) {
            batch.delete(manifests, md);
            batch.delete(refs, md);
          }
          db.write(sync, batch);
        }
        return true;
      } catch (RocksDBException e) {
        throw error("cannot delete " + tag, e);
      }
    }
  }

  /**
   * {@inheritDoc}
   *
   * <p>Live chunks are those named by the chunk list of a manifest some tag points at, plus this instance's
   * pending set (stored since open and not yet named by a commit: an in-flight build's). Manifests no tag
   * points at go too. Then the packs: a pack no live chunk is in is deleted; one whose live chunks fill less
   * than {@link #COMPACT_BELOW} of it has them copied to the active pack (forced, re-indexed in one synced
   * batch) and is deleted. Bytes no index entry names — a killed build's — count as dead, so they go the same
   * way. The packs being appended to are never touched. Schema-1 chunks are deleted from RocksDB, whose
   * compaction returns their blob files' space.
   */
  @Override
  public GarbageCollection collectGarbage() {
    checkWritable();
    synchronized (catalogLock) {
      try {
        Set<ByteBuffer> liveManifests = new HashSet<>();
        try (RocksIterator it = db.newIterator(tags, scan)) {
          for (it.seekToFirst(); it.isValid(); it.next()) {
            liveManifests.add(ByteBuffer.wrap(it.value()));
          }
          status(it, "cannot scan tags");
        }
        Set<ByteBuffer> live = new HashSet<>();
        try (WriteBatch orphans = new WriteBatch(); RocksIterator it = db.newIterator(refs, scan)) {
          for (it.seekToFirst(); it.isValid(); it.next()) {
            byte[] md = it.key();
            if (!liveManifests.contains(ByteBuffer.wrap(md))) {
              orphans.delete(refs, md);
              orphans.delete(manifests, md);
              continue;
            }
            byte[] packed = it.value();
            for (int i = 0; i < packed.length; i += 32) {
              live.add(ByteBuffer.wrap(packed, i, 32).slice());
            }
          }
          status(it, "cannot scan chunk lists");
          db.write(sync, orphans);
        }
        long freedChunks = 0;
        long freedBytes = 0;
        long freedDisk = 0;
        boolean freedLegacy = false;
        sweepLock.writeLock().lock();
        try {
          sync(); // no put runs now: every chunk is indexed, and the unsynced ones are all pending anyway
          try (WriteBatch batch = new WriteBatch(); RocksIterator it = db.newIterator(chunkSizes, scan)) {
            for (it.seekToFirst(); it.isValid(); it.next()) {
              ByteBuffer key = ByteBuffer.wrap(it.key());
              if (live.contains(key) || pending.contains(key)) {
                continue;
              }
              int size = ByteBuffer.wrap(it.value()).getInt();
              if (location(key.array()) == null) {
                // A schema-1 chunk: its bytes leave RocksDB's blob files at the compaction below.
                batch.delete(chunks, key.array());
                freedLegacy = true;
                freedDisk += size;
              } else {
                batch.delete(chunkPacks, key.array());
              }
              batch.delete(chunkSizes, key.array());
              freedChunks++;
              freedBytes += size;
            }
            status(it, "cannot scan chunks");
            db.write(sync, batch);
          }
          freedDisk += collectPacks();
        } finally {
          sweepLock.writeLock().unlock();
        }
        if (freedLegacy) {
          db.compactRange(chunks);
          db.compactRange(chunkSizes);
        }
        return new GarbageCollection(freedChunks, freedBytes, freedDisk);
      } catch (RocksDBException e) {
        throw error("garbage collection failed", e);
      } catch (IOException e) {
        throw new StoreException(path, "garbage collection failed: " + IoErrors.describe(e), null, e);
      }
    }
  }

  /**
   * Deletes or compacts the packs that dead chunks left, and the packs no index entry names at all (a build killed
   * before its sync); holds the sweep lock, so no put runs meanwhile. Returns the bytes the packs shrank by.
   */
  private long collectPacks() throws RocksDBException, IOException {
    long freed = 0;
    Map<Long, Long> liveBytes = new HashMap<>();
    Map<Long, List<Map.Entry<byte[], PackFiles.Location>>> liveChunks = new HashMap<>();
    try (RocksIterator it = db.newIterator(chunkPacks, scan)) {
      for (it.seekToFirst(); it.isValid(); it.next()) {
        PackFiles.Location at = PackFiles.Location.of(it.value());
        liveBytes.merge(at.pack(), (long) at.length(), Long::sum);
        liveChunks.computeIfAbsent(at.pack(), x -> new ArrayList<>()).add(Map.entry(it.key(), at));
      }
      status(it, "cannot scan the pack index");
    }
    Set<Long> active = packs.activeIds();
    for (long id : packs.onDisk()) {
      if (active.contains(id)) {
        continue;
      }
      long liveInPack = liveBytes.getOrDefault(id, 0L);
      long size = packs.size(id);
      if (liveInPack == 0) {
        packs.delete(id);
        freed += size;
      } else if (liveInPack < COMPACT_BELOW * size) {
        List<Map.Entry<byte[], PackFiles.Location>> moving = liveChunks.get(id);
        int largest = moving.stream().mapToInt(e -> e.getValue().length()).max().orElse(0);
        ByteBuffer buf = ByteBuffer.allocateDirect(largest);
        try (WriteBatch wb = new WriteBatch()) {
          for (Map.Entry<byte[], PackFiles.Location> e : moving) {
            buf.clear();
            packs.read(e.getValue(), buf);
            buf.limit(e.getValue().length());
            wb.put(chunkPacks, e.getKey(), packs.append(buf).toBytes());
          }
          packs.force();
          db.write(sync, wb); // the copies are durable before the index names them, and the old pack goes after
        }
        packs.delete(id);
        freed += size - liveInPack;
      }
    }
    return freed;
  }

  /** How many chunks this instance protects from GC because no commit has named them yet. */
  public int pendingChunks() {
    return pending.size();
  }

  /** Forgets the pending set: an aborted build's chunks become collectable without reopening. */
  public void releasePending() {
    pending.clear();
  }

  /** How many chunks are stored (synced or not). */
  public long chunkCount() {
    checkOpen();
    long n = unsynced.size();
    try (RocksIterator it = db.newIterator(chunkSizes, scan)) {
      for (it.seekToFirst(); it.isValid(); it.next()) {
        n++;
      }
      status(it, "cannot count chunks");
    }
    return n;
  }

  /**
   * Re-reads and re-hashes every stored chunk; returns the digests of those whose bytes no longer match, cannot
   * be read (a missing or short pack, a blob checksum error) or disagree with their size record, sorted. Empty:
   * the store is sound.
   */
  public List<Digest> verify() {
    checkOpen();
    TreeSet<Digest> bad = new TreeSet<>();
    List<byte[]> keys = new ArrayList<>();
    List<Integer> sizes = new ArrayList<>();
    try (RocksIterator it = db.newIterator(chunkSizes, scan)) {
      for (it.seekToFirst(); it.isValid(); it.next()) {
        keys.add(it.key());
        sizes.add(ByteBuffer.wrap(it.value()).getInt());
      }
      status(it, "cannot scan chunk sizes");
    }
    MessageDigest sha = Digest.sha256();
    ByteBuffer buf = ByteBuffer.allocateDirect(1 << 20);
    for (int i = 0; i < keys.size(); i++) {
      byte[] key = keys.get(i);
      Digest d = Digest.fromBytes(key);
      try {
        PackFiles.Location at = location(key);
        int n;
        int size = sizes.get(i);
        int room = Math.max(size, at == null ? 0 : at.length());
        if (buf.capacity() < room) {
          buf = ByteBuffer.allocateDirect(room);
        }
        buf.clear();
        if (at != null) {
          n = at.length() == size ? packs.read(at, buf) : -1;
        } else {
          n = readLegacy(key, buf);
        }
        if (n != size) {
          bad.add(d);
          continue;
        }
        sha.update(buf.limit(n));
        if (!Arrays.equals(sha.digest(), key)) {
          bad.add(d);
        }
      } catch (RocksDBException | IOException e) {
        bad.add(d);
      }
    }
    return new ArrayList<>(bad);
  }

  /**
   * Makes every chunk durable and moves everything written so far out of the memtables into table files
   * (RocksDB {@code flush}): for benchmarks that must read from files, and before copying a store's directory.
   */
  public void flush() {
    checkWritable();
    sync();
    try (FlushOptions f = new FlushOptions().setWaitForFlush(true)) {
      db.flush(f, List.of(chunks, chunkSizes, manifests, refs, tags, meta, chunkPacks));
    } catch (RocksDBException e) {
      throw error("cannot flush", e);
    }
  }

  /** A new pack's id, never one used before in this store (ids are not reused after GC deletes a pack). */
  private long newPackId() {
    try {
      byte[] v = db.get(meta, read, META_NEXT_PACK);
      long id = Math.max(v == null ? 1 : ByteBuffer.wrap(v).getLong(), packs.highestOnDisk() + 1);
      db.put(meta, sync, META_NEXT_PACK, ByteBuffer.allocate(8).putLong(id + 1).array());
      return id;
    } catch (RocksDBException e) {
      throw error("cannot start a pack file", e);
    } catch (IOException e) {
      throw new StoreException(path, "cannot start a pack file: " + IoErrors.describe(e), null, e);
    }
  }

  /**
   * Closes the store; a writable one first makes the chunks put since the last {@link #sync()} durable (so a
   * clean close loses nothing, as a RocksDB close flushing its memtables did). Idempotent.
   */
  @Override
  public void close() {
    if (open.get() && !options.readOnly() && !unsynced.isEmpty()) {
      try {
        sync();
      } catch (RuntimeException e) {
        // Closing anyway: the chunks were never named by a commit, so nothing committed is lost.
      }
    }
    if (open.compareAndSet(true, false)) {
      // Wait out a running GC sweep or put; later calls fail at checkOpen.
      sweepLock.writeLock().lock();
      try {
        synchronized (catalogLock) {
          if (packs != null) {
            packs.close();
          }
          closeResources();
        }
      } finally {
        sweepLock.writeLock().unlock();
      }
    }
  }

  private void closeResources() {
    for (int i = resources.size() - 1; i >= 0; i--) {
      try {
        resources.get(i).close();
      } catch (Exception ignored) {
        // Closing native handles does not fail in practice; keep closing the rest.
      }
    }
    resources.clear();
  }

  // ------------------------------------------------------------------------------------------- helpers

  private void checkOpen() {
    if (!open.get()) {
      throw new IllegalStateException("store " + path + " is closed");
    }
  }

  private void checkWritable() {
    checkOpen();
    if (options.readOnly()) {
      throw new StoreException(path, "opened read-only");
    }
  }

  private void status(RocksIterator it, String what) {
    try {
      it.status();
    } catch (RocksDBException e) {
      throw error(what, e);
    }
  }

  private static boolean corruption(RocksDBException e) {
    return e.getStatus() != null && e.getStatus().getCode() == Status.Code.Corruption;
  }

  private StoreException error(String what, RocksDBException e) {
    String code = e.getStatus() == null ? null : e.getStatus().getCodeString();
    return new StoreException(path, what + ": " + e.getMessage(), code, e);
  }

  private static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  private static String string(byte[] b) {
    return new String(b, StandardCharsets.UTF_8);
  }

  private static byte[] intBytes(int v) {
    return ByteBuffer.allocate(4).order(ByteOrder.BIG_ENDIAN).putInt(v).array();
  }
}
