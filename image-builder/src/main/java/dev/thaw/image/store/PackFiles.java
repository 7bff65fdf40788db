package dev.thaw.image.store;

import dev.thaw.runtime.host.Threads;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;

/**
 * The store's chunk bytes: append-only pack files {@code packs/<id>.pack}, each the bare concatenation of the
 * chunks written to it. A chunk is found by its {@link Location}; the index from digest to location lives in
 * RocksDB. A process appends only to packs it created, so a pack that another process wrote is immutable here.
 *
 * <p>Appends from many threads reserve their range under a short lock and write it with a positional write
 * outside it. They go to {@link #STRIPES} packs at once, by thread: the kernel serializes buffered writes to
 * one file on its inode lock, so one pack would make every hashing thread's copy into the page cache wait in
 * line. Once a pack has {@link #WRITEBACK_BYTES} unforced, a background thread forces it, so the disk
 * writes back while the snapshot goes on and {@link #force()} at the end has only the tail left.
 */
final class PackFiles implements AutoCloseable {

  /** Unforced bytes in one pack after which a background force starts. */
  static final long WRITEBACK_BYTES = 64L << 20;
  /** Packs appended to at once. */
  static final int STRIPES = 4;

  /** Where a chunk's bytes are. */
  record Location(long pack, long offset, int length) {

    static final int BYTES = 20;

    byte[] toBytes() {
      return ByteBuffer.allocate(BYTES).putLong(pack).putLong(offset).putInt(length).array();
    }

    static Location of(byte[] b) {
      ByteBuffer v = ByteBuffer.wrap(b);
      return new Location(v.getLong(), v.getLong(), v.getInt());
    }
  }

  private final class Pack {
    final long id;
    final FileChannel channel;
    /** Bytes reserved (appends) or the file's size (a pack opened to read). */
    final AtomicLong size;
    final AtomicLong unforced = new AtomicLong();
    final AtomicBoolean forcing = new AtomicBoolean();

    Pack(long id, FileChannel channel, long size) {
      this.id = id;
      this.channel = channel;
      this.size = new AtomicLong(size);
    }
  }

  private final Path dir;
  private final long packBytes;
  private final LongSupplier newId;
  private final Map<Long, Pack> open = new ConcurrentHashMap<>();
  /** Packs written since the last {@link #force()}. */
  private final Set<Pack> dirty = ConcurrentHashMap.newKeySet();
  private final Object[] appendLocks = new Object[STRIPES];
  private final Pack[] active = new Pack[STRIPES];
  private volatile boolean newFiles;
  private final ExecutorService writeback;

  PackFiles(Path storeDir, boolean readOnly, long packBytes, LongSupplier newId) {
    this.dir = storeDir.resolve("packs");
    this.packBytes = packBytes;
    this.newId = newId;
    for (int i = 0; i < STRIPES; i++) {
      appendLocks[i] = new Object();
    }
    this.writeback = readOnly ? null : Executors.newSingleThreadExecutor(Threads.daemonFactory("thaw-pack-writeback"));
  }

  Path dir() {
    return dir;
  }

  Path file(long id) {
    return dir.resolve(String.format(Locale.ROOT, "%016x.pack", id));
  }

  /** Appends {@code data} (position to limit) to the active pack; returns where it went. */
  Location append(ByteBuffer data) throws IOException {
    int length = data.remaining();
    Pack pack;
    long offset;
    int stripe = (int) (Thread.currentThread().getId() % STRIPES);
    synchronized (appendLocks[stripe]) {
      pack = active[stripe];
      if (pack == null || (pack.size.get() > 0 && pack.size.get() + length > packBytes)) {
        pack = create();
        active[stripe] = pack;
      }
      offset = pack.size.getAndAdd(length);
    }
    long at = offset;
    while (data.hasRemaining()) {
      at += pack.channel.write(data, at);
    }
    dirty.add(pack);
    if (pack.unforced.addAndGet(length) >= WRITEBACK_BYTES && pack.forcing.compareAndSet(false, true)) {
      Pack p = pack;
      writeback.execute(() -> {
        try {
          p.unforced.set(0);
          p.channel.force(false);
        } catch (IOException ignored) {
          // force() below reports it: it forces every dirty pack again.
        } finally {
          p.forcing.set(false);
        }
      });
    }
    return new Location(pack.id, offset, length);
  }

  private Pack create() throws IOException {
    Files.createDirectories(dir);
    long id;
    synchronized (newId) {
      id = newId.getAsLong();
    }
    FileChannel ch = FileChannel.open(file(id), StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE,
        StandardOpenOption.READ);
    Pack p = new Pack(id, ch, 0);
    open.put(id, p);
    newFiles = true;
    return p;
  }

  /**
   * Makes every append that returned before this call durable: forces each pack written since the last call,
   * and the directory when a pack was created. One at a time: a caller that finds nothing dirty must not return
   * while another is still forcing what it took.
   */
  synchronized void force() throws IOException {
    List<Pack> packs = new ArrayList<>(dirty);
    for (Pack p : packs) {
      dirty.remove(p);
      p.channel.force(false);
      p.unforced.set(0);
    }
    if (newFiles) {
      newFiles = false;
      try (FileChannel d = FileChannel.open(dir, StandardOpenOption.READ)) {
        d.force(true);
      }
    }
  }

  /**
   * Reads the chunk at {@code at} into {@code dst} from its position; {@code dst} must have room. Position
   * unchanged; returns the bytes read.
   *
   * @throws NoSuchFileException if its pack is gone
   * @throws IOException if the pack is shorter than the location says (a truncated pack)
   */
  int read(Location at, ByteBuffer dst) throws IOException {
    Pack p = pack(at.pack());
    ByteBuffer into = dst.slice().limit(at.length());
    long pos = at.offset();
    while (into.hasRemaining()) {
      int n = p.channel.read(into, pos);
      if (n < 0) {
        throw new IOException("pack " + file(at.pack()).getFileName() + " ends at " + pos + ", before the chunk's "
            + at.length() + " bytes from " + at.offset());
      }
      pos += n;
    }
    return at.length();
  }

  private Pack pack(long id) throws IOException {
    Pack p = open.get(id);
    if (p != null) {
      return p;
    }
    synchronized (open) {
      p = open.get(id);
      if (p == null) {
        FileChannel ch = FileChannel.open(file(id), StandardOpenOption.READ);
        p = new Pack(id, ch, ch.size());
        open.put(id, p);
      }
      return p;
    }
  }

  /** The ids of the pack files on disk. */
  Set<Long> onDisk() throws IOException {
    Set<Long> ids = new TreeSet<>();
    if (!Files.isDirectory(dir)) {
      return ids;
    }
    try (var list = Files.list(dir)) {
      for (Path f : list.toList()) {
        String name = f.getFileName().toString();
        if (name.matches("[0-9a-f]{16}\\.pack")) {
          ids.add(Long.parseUnsignedLong(name.substring(0, 16), 16));
        }
      }
    }
    return ids;
  }

  /** The highest pack id on disk, or 0. */
  long highestOnDisk() throws IOException {
    return onDisk().stream().mapToLong(Long::longValue).max().orElse(0);
  }

  /** The ids of the packs appends go to now. */
  Set<Long> activeIds() {
    Set<Long> ids = new HashSet<>();
    for (int i = 0; i < STRIPES; i++) {
      synchronized (appendLocks[i]) {
        if (active[i] != null) {
          ids.add(active[i].id);
        }
      }
    }
    return ids;
  }

  /** The size of a pack file on disk. */
  long size(long id) throws IOException {
    return Files.size(file(id));
  }

  /** Deletes a pack that no index entry names any more (never the active one). */
  void delete(long id) throws IOException {
    if (activeIds().contains(id)) {
      throw new IllegalStateException("pack " + id + " is being written");
    }
    Pack p = open.remove(id);
    if (p != null) {
      dirty.remove(p);
      p.channel.close();
    }
    Files.deleteIfExists(file(id));
  }

  @Override
  public void close() {
    if (writeback != null) {
      writeback.shutdown();
      try {
        writeback.awaitTermination(1, TimeUnit.MINUTES);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    Set<Pack> all = new HashSet<>(open.values());
    open.clear();
    for (Pack p : all) {
      try {
        p.channel.close();
      } catch (IOException ignored) {
        // Closing a channel we only read or already forced loses nothing.
      }
    }
  }
}
