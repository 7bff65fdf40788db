package dev.thaw.image.store;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.BloomFilter;
import org.rocksdb.ColumnFamilyDescriptor;
import org.rocksdb.ColumnFamilyHandle;
import org.rocksdb.ColumnFamilyOptions;
import org.rocksdb.CompressionType;
import org.rocksdb.DBOptions;
import org.rocksdb.ReadOptions;
import org.rocksdb.RocksDB;
import org.rocksdb.RocksDBException;
import org.rocksdb.RocksIterator;
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
    RocksDB.loadLibrary();
  }

  /** Bumped when the layout below changes; a store written by a newer layout is refused. */
  public static final int SCHEMA_VERSION = 1;

  static final String CF_CHUNKS = "chunks";
  static final String CF_CHUNK_SIZES = "chunk-sizes";
  static final String CF_MANIFESTS = "manifests";
  static final String CF_REFS = "refs";
  static final String CF_TAGS = "tags";
  static final String CF_META = "meta";
  private static final List<String> FAMILIES =
      List.of(CF_CHUNKS, CF_CHUNK_SIZES, CF_MANIFESTS, CF_REFS, CF_TAGS, CF_META);
  private static final byte[] META_SCHEMA = bytes("schema-version");
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
  private final WriteOptions noSync;
  /** Chunk writes skip the write-ahead log: {@link #sync()} flushes them to table and blob files instead. */
  private final WriteOptions noWal;
  private final WriteOptions sync;
  private final ReadOptions read;
  private final ReadOptions scan;
  private final AtomicBoolean open = new AtomicBoolean(true);

  /** Chunks put and not yet named by a commit: never collected. Keys are raw 32-byte digests. */
  private final Set<ByteBuffer> pending = ConcurrentHashMap.newKeySet();
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
      List<ColumnFamilyDescriptor> descriptors = new ArrayList<>();
      descriptors.add(new ColumnFamilyDescriptor(RocksDB.DEFAULT_COLUMN_FAMILY, track(new ColumnFamilyOptions())));
      for (String name : FAMILIES) {
        descriptors.add(new ColumnFamilyDescriptor(bytes(name), familyOptions(name)));
      }
      List<ColumnFamilyHandle> handles = new ArrayList<>();
      // Each open writes an info log of ~120 KB and rotates the last one aside: keep a few, not every one.
      dbOptions.setKeepLogFileNum(KEPT_INFO_LOGS).setMaxLogFileSize(MAX_INFO_LOG_BYTES);
      boolean exists = StoreDirectory.exists(path);
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
            throw new StoreException(path, "cannot create the store: " + StoreDirectory.describe(e), null, e);
          }
        }
        // Atomic flush: chunks and their sizes reach the files together, since their writes skip the WAL.
        dbOptions.setCreateIfMissing(!exists).setCreateMissingColumnFamilies(!exists).setAtomicFlush(true);
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
      noSync = track(new WriteOptions());
      noWal = track(new WriteOptions().setDisableWAL(true));
      sync = track(new WriteOptions().setSync(true));
      read = track(new ReadOptions());
      scan = track(new ReadOptions().setFillCache(false));
      checkSchema();
    } catch (RocksDBException e) {
      closeResources();
      if (e.getStatus() != null && e.getStatus().getCode() == org.rocksdb.Status.Code.IOError
          && String.valueOf(e.getMessage()).contains("LOCK")) {
        throw new StoreLockedException(path, e);
      }
      if (e.getStatus() != null && e.getStatus().getCode() == org.rocksdb.Status.Code.Corruption) {
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
    return new RocksChunkStore(options);
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
          .setEnableBlobGarbageCollection(true)
          // Blob values stay in the memtable until a flush writes them out: a snapshot is a bulk load, so
          // give it memtables many enough that writers do not stall, small enough that flushes overlap the
          // snapshot rather than pile up at sync() (measured on the H200: 4 x 256 MiB left 0.63 s for sync).
          .setWriteBufferSize(128L << 20)
          .setMaxWriteBufferNumber(8);
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
  }

  // ---------------------------------------------------------------------------------------------- chunks

  @Override
  public boolean contains(Digest digest) {
    return chunkSize(digest).isPresent();
  }

  @Override
  public Optional<Integer> chunkSize(Digest digest) {
    checkOpen();
    try {
      byte[] v = db.get(chunkSizes, read, digest.toBytes());
      return v == null ? Optional.empty() : Optional.of(ByteBuffer.wrap(v).getInt());
    } catch (RocksDBException e) {
      throw error("cannot read the size of " + digest, e);
    }
  }

  @Override
  public void putChunk(Digest digest, ByteBuffer data) {
    checkWritable();
    if (options.verifyWrites()) {
      Digest actual = Digest.of(data);
      if (!actual.equals(digest)) {
        throw new IllegalArgumentException("chunk named " + digest + " hashes to " + actual);
      }
    }
    byte[] key = digest.toBytes();
    sweepLock.readLock().lock();
    try {
      // Pending before the presence check: a chunk found present is protected from GC all the same.
      pending.add(ByteBuffer.wrap(key));
      if (db.get(chunkSizes, read, key) != null) {
        return;
      }
      try (WriteBatch batch = new WriteBatch()) {
        ByteBuffer value = data.duplicate();
        if (value.isDirect()) {
          ByteBuffer k = ByteBuffer.allocateDirect(32).put(key).flip();
          batch.put(chunks, k, value);
        } else {
          byte[] copy = new byte[value.remaining()];
          value.get(copy);
          batch.put(chunks, key, copy);
        }
        batch.put(chunkSizes, key, intBytes(data.remaining()));
        db.write(noWal, batch);
      }
    } catch (RocksDBException e) {
      throw error("cannot store chunk " + digest, e);
    } finally {
      sweepLock.readLock().unlock();
    }
  }

  /**
   * {@inheritDoc}
   *
   * <p>Chunk writes skip the write-ahead log (each chunk would otherwise be written twice: measured as the
   * snapshot's bottleneck on the GPU host), so this flushes the chunk families to table and blob files,
   * atomically, and waits. A chunk lost in a crash before that was never named by a committed manifest.
   */
  @Override
  public void sync() {
    checkWritable();
    try (org.rocksdb.FlushOptions f = new org.rocksdb.FlushOptions().setWaitForFlush(true)) {
      db.flush(f, List.of(chunks, chunkSizes));
    } catch (RocksDBException e) {
      throw error("cannot flush the chunks to disk", e);
    }
  }

  /**
   * {@inheritDoc}
   *
   * <p>A direct {@code dst} receives the bytes straight from RocksDB (its direct {@code get}, no copy on the
   * Java side); a heap one through the array API. When {@link StoreOptions#verifyReads()} is on, the bytes
   * are re-hashed before the position moves. If the chunk does not fit, the bytes from {@code dst}'s position
   * to its limit may have been overwritten with a prefix of it; its position and limit are unchanged.
   *
   * @throws CorruptChunkException if verifying and the bytes don't hash to {@code digest} (position unchanged)
   */
  @Override
  public int readChunk(Digest digest, ByteBuffer dst) {
    checkOpen();
    int n;
    try {
      if (dst.isDirect()) {
        ByteBuffer key = KEY.get().clear().put(digest.toBytes()).flip();
        // RocksDB moves the key's position to its limit and sets the value's limit to the bytes it wrote:
        // it gets a slice, so dst's own position and limit stay ours.
        n = db.get(chunks, read, key, dst.slice());
      } else {
        byte[] key = digest.toBytes();
        n = db.get(chunks, read, key, 0, key.length, dst.array(), dst.arrayOffset() + dst.position(),
            dst.remaining());
      }
    } catch (RocksDBException e) {
      throw error(corruption(e) ? "chunk " + digest + " is damaged" : "cannot read chunk " + digest, e);
    }
    if (n == RocksDB.NOT_FOUND) {
      throw new ChunkNotFoundException(digest);
    }
    if (n > dst.remaining()) {
      throw new IllegalArgumentException(
          "chunk " + digest + " has " + n + " bytes; the buffer has room for " + dst.remaining());
    }
    if (options.verifyReads()) {
      checkDigest(digest, dst.slice().limit(n));
    }
    dst.position(dst.position() + n);
    return n;
  }

  private void checkDigest(Digest digest, ByteBuffer bytes) {
    Digest actual = Digest.of(bytes);
    if (!actual.equals(digest)) {
      throw new CorruptChunkException(path, digest, actual);
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
    // Chunks skip the WAL: make them durable before a manifest can name them (a no-op after sync()).
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
   * points at go too. Space comes back as compaction drops the deleted blobs' files.
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
        sweepLock.writeLock().lock();
        try (WriteBatch batch = new WriteBatch(); RocksIterator it = db.newIterator(chunkSizes, scan)) {
          for (it.seekToFirst(); it.isValid(); it.next()) {
            ByteBuffer key = ByteBuffer.wrap(it.key());
            if (live.contains(key) || pending.contains(key)) {
              continue;
            }
            batch.delete(chunks, key.array());
            batch.delete(chunkSizes, key.array());
            freedChunks++;
            freedBytes += ByteBuffer.wrap(it.value()).getInt();
          }
          status(it, "cannot scan chunks");
          db.write(sync, batch);
        } finally {
          sweepLock.writeLock().unlock();
        }
        if (freedChunks > 0) {
          db.compactRange(chunks);
          db.compactRange(chunkSizes);
        }
        return new GarbageCollection(freedChunks, freedBytes);
      } catch (RocksDBException e) {
        throw error("garbage collection failed", e);
      }
    }
  }

  /** How many chunks this instance protects from GC because no commit has named them yet. */
  public int pendingChunks() {
    return pending.size();
  }

  /** Forgets the pending set: an aborted build's chunks become collectable without reopening. */
  public void releasePending() {
    pending.clear();
  }

  /** How many chunks are stored. */
  public long chunkCount() {
    checkOpen();
    long n = 0;
    try (RocksIterator it = db.newIterator(chunkSizes, scan)) {
      for (it.seekToFirst(); it.isValid(); it.next()) {
        n++;
      }
      status(it, "cannot count chunks");
    }
    return n;
  }

  /**
   * Re-hashes every stored chunk; returns the digests of those whose bytes no longer match (or whose size
   * record disagrees with them, or that have a size record and no bytes), sorted. Empty: the store is sound.
   */
  public List<Digest> verify() {
    checkOpen();
    TreeSet<Digest> bad = new TreeSet<>();
    Set<ByteBuffer> seen = new HashSet<>();
    MessageDigest sha = Digest.sha256();
    try (RocksIterator it = db.newIterator(chunks, scan)) {
      for (it.seekToFirst(); it.isValid(); it.next()) {
        byte[] key = it.key();
        byte[] value = it.value();
        seen.add(ByteBuffer.wrap(key));
        Digest d = Digest.fromBytes(key);
        if (!Arrays.equals(sha.digest(value), key)) {
          bad.add(d);
          continue;
        }
        byte[] size = db.get(chunkSizes, read, key);
        if (size == null || ByteBuffer.wrap(size).getInt() != value.length) {
          bad.add(d);
        }
      }
      status(it, "cannot scan chunks");
    } catch (RocksDBException e) {
      throw error("verify failed", e);
    }
    try (RocksIterator it = db.newIterator(chunkSizes, scan)) {
      for (it.seekToFirst(); it.isValid(); it.next()) {
        if (!seen.contains(ByteBuffer.wrap(it.key()))) {
          bad.add(Digest.fromBytes(it.key()));
        }
      }
      status(it, "cannot scan chunk sizes");
    }
    return new ArrayList<>(bad);
  }

  /**
   * Moves everything written so far out of the memtables into table and blob files (RocksDB {@code flush}):
   * for benchmarks that must read from files, and before copying a store's directory.
   */
  public void flush() {
    checkWritable();
    try (org.rocksdb.FlushOptions f = new org.rocksdb.FlushOptions().setWaitForFlush(true)) {
      db.flush(f, List.of(chunks, chunkSizes, manifests, refs, tags, meta));
    } catch (RocksDBException e) {
      throw error("cannot flush", e);
    }
  }

  @Override
  public void close() {
    if (open.compareAndSet(true, false)) {
      // Wait out a running GC sweep or put; later calls fail at checkOpen.
      sweepLock.writeLock().lock();
      try {
        synchronized (catalogLock) {
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
    return e.getStatus() != null && e.getStatus().getCode() == org.rocksdb.Status.Code.Corruption;
  }

  private StoreException error(String what, RocksDBException e) {
    String code = e.getStatus() == null ? null : e.getStatus().getCodeString();
    return new StoreException(path, what + ": " + e.getMessage(), code, e);
  }

  private static byte[] bytes(String s) {
    return s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
  }

  private static String string(byte[] b) {
    return new String(b, java.nio.charset.StandardCharsets.UTF_8);
  }

  private static byte[] intBytes(int v) {
    return ByteBuffer.allocate(4).order(ByteOrder.BIG_ENDIAN).putInt(v).array();
  }
}
