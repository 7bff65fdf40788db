package dev.thaw.pool.cache;

import dev.thaw.image.store.Digest;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Where one image's chunks lie in a host cache arena: the answer {@link HostImageCache#stage} gives the parent,
 * which the pool hands to the worker (with the image) so that its {@link HostCacheView} can find them. Entries
 * are in {@link RestoreOrder}, one per use of a chunk: the module cubins (no device address), then every chunk of
 * every allocation with the device address it is restored to. A chunk used in several places has an entry for each,
 * which may all name one place in the arena or each its own ({@link HostCacheOptions.Layout}); runs that are
 * contiguous both in the arena and on the device are what lets a restore coalesce its copies.
 *
 * <p>{@link #toBytes()} is a compact binary form for the pool's protocol: the arena's name, then per entry its
 * 32 digest bytes, an 8-byte offset, a 4-byte length and an 8-byte device address (-1 for none), little-endian.
 */
public final class ChunkPlacement {

  /** No device address: a module's cubin, which the restore reads on the host. */
  public static final long NO_DEVICE = -1;

  /** One use of a chunk: {@code length} bytes at {@code offset} of the arena, restored to {@code device}. */
  public record Entry(Digest digest, long offset, int length, long device) {

    /** An entry with no device address. */
    public Entry(Digest digest, long offset, int length) {
      this(digest, offset, length, NO_DEVICE);
    }
  }

  private static final int MAGIC = 0x54484351; // "THCQ": entries carry device addresses
  private static final int ENTRY_BYTES = 52;

  private final String arena;
  private final List<Entry> entries;
  private final Map<Digest, Entry> byDigest;
  private final Map<Long, Entry> byDevice;
  /** {@link #toBytes()}, made once: a placement is sent with every BECOME of its image. */
  private volatile byte[] bytes;

  public ChunkPlacement(String arena, List<Entry> entries) {
    this.arena = arena;
    this.entries = List.copyOf(entries);
    Map<Digest, Entry> map = new HashMap<>(entries.size() * 2);
    Map<Long, Entry> devices = new HashMap<>(entries.size() * 2);
    for (Entry e : this.entries) {
      map.putIfAbsent(e.digest(), e);
      if (e.device() != NO_DEVICE) {
        devices.putIfAbsent(e.device(), e);
      }
    }
    this.byDigest = Collections.unmodifiableMap(map);
    this.byDevice = Collections.unmodifiableMap(devices);
  }

  /** The arena this placement is for: the path of its shared file. */
  public String arena() {
    return arena;
  }

  /** Every chunk, in restore order. */
  public List<Entry> entries() {
    return entries;
  }

  /** A place of the chunk (its first use's), or null. */
  public Entry find(Digest digest) {
    return byDigest.get(digest);
  }

  /**
   * The place of chunk {@code digest}'s use at device address {@code device}, or null when no entry has that address
   * (or names another chunk there): then any place of the chunk will do ({@link #find(Digest)}).
   */
  public Entry find(long device, Digest digest) {
    Entry e = byDevice.get(device);
    return e != null && e.digest().equals(digest) ? e : null;
  }

  /** Bytes of the distinct chunks placed. */
  public long bytes() {
    return byDigest.values().stream().mapToLong(Entry::length).sum();
  }

  /** Bytes of the arena the entries name, each place once: more than {@link #bytes()} where repeats are held again. */
  public long arenaBytes() {
    Map<Long, Integer> places = new HashMap<>();
    entries.forEach(e -> places.merge(e.offset(), e.length(), Math::max));
    return places.values().stream().mapToLong(Integer::longValue).sum();
  }

  /**
   * How many copies a whole restore in entry order needs: a new one wherever the next entry does not follow the last
   * both in the arena and on the device. Cubins count one run each.
   */
  public int runs() {
    int runs = 0;
    long next = -1;
    long nextDevice = NO_DEVICE;
    for (Entry e : entries) {
      if (e.offset() != next || e.device() == NO_DEVICE || e.device() != nextDevice) {
        runs++;
      }
      next = e.offset() + e.length();
      nextDevice = e.device() == NO_DEVICE ? NO_DEVICE : e.device() + e.length();
    }
    return runs;
  }

  /** The binary form; the same array every time (do not change it). */
  public byte[] toBytes() {
    byte[] b = bytes;
    if (b == null) {
      b = encode();
      bytes = b;
    }
    return b;
  }

  private byte[] encode() {
    byte[] name = arena.getBytes(StandardCharsets.UTF_8);
    ByteBuffer b = ByteBuffer.allocate(12 + name.length + entries.size() * ENTRY_BYTES)
        .order(ByteOrder.LITTLE_ENDIAN);
    b.putInt(MAGIC).putInt(name.length).put(name).putInt(entries.size());
    for (Entry e : entries) {
      b.put(e.digest().toBytes()).putLong(e.offset()).putInt(e.length()).putLong(e.device());
    }
    return b.array();
  }

  /**
   * Reads {@link #toBytes()}'s form.
   *
   * @throws IllegalArgumentException if the bytes are not a placement
   */
  public static ChunkPlacement fromBytes(byte[] bytes) {
    ByteBuffer b = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
    try {
      if (b.getInt() != MAGIC) {
        throw new IllegalArgumentException("not a chunk placement");
      }
      byte[] name = new byte[b.getInt()];
      b.get(name);
      int n = b.getInt();
      if (n < 0 || (long) n * ENTRY_BYTES != b.remaining()) {
        throw new IllegalArgumentException("a chunk placement of " + n + " entries needs " + ((long) ENTRY_BYTES * n)
            + " bytes, not " + b.remaining());
      }
      List<Entry> entries = new ArrayList<>(n);
      byte[] digest = new byte[32];
      for (int i = 0; i < n; i++) {
        b.get(digest);
        long offset = b.getLong();
        int length = b.getInt();
        long device = b.getLong();
        if (offset < 0 || length <= 0 || device < NO_DEVICE) {
          throw new IllegalArgumentException("entry " + i + " has offset " + offset + ", length " + length
              + " and device address " + device);
        }
        entries.add(new Entry(Digest.fromBytes(digest), offset, length, device));
      }
      return new ChunkPlacement(new String(name, StandardCharsets.UTF_8), entries);
    } catch (java.nio.BufferUnderflowException | NegativeArraySizeException e) {
      throw new IllegalArgumentException("a chunk placement is cut short", e);
    }
  }

  @Override
  public String toString() {
    return "ChunkPlacement[" + arena + ", " + entries.size() + " entries, " + bytes() + " bytes, " + runs() + " runs]";
  }
}
