package dev.thaw.pool.cache;

import dev.thaw.image.store.Digest;
import java.nio.BufferUnderflowException;
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
 * are in restore order; runs that are contiguous in the arena are what lets a restore coalesce its copies.
 *
 * <p>{@link #toBytes()} is a compact binary form for the pool's protocol: the arena's name, then per chunk its
 * 32 digest bytes, an 8-byte offset and a 4-byte length, little-endian.
 */
public final class ChunkPlacement {

  /** One chunk: {@code length} bytes at {@code offset} of the arena. */
  public record Entry(Digest digest, long offset, int length) {}

  private static final int MAGIC = 0x54484350; // "THCP"

  private final String arena;
  private final List<Entry> entries;
  private final Map<Digest, Entry> byDigest;
  /** {@link #toBytes()}, made once: a placement is sent with every BECOME of its image. */
  private volatile byte[] bytes;

  public ChunkPlacement(String arena, List<Entry> entries) {
    this.arena = arena;
    this.entries = List.copyOf(entries);
    Map<Digest, Entry> map = new HashMap<>(entries.size() * 2);
    for (Entry e : this.entries) {
      map.putIfAbsent(e.digest(), e);
    }
    this.byDigest = Collections.unmodifiableMap(map);
  }

  /** The arena this placement is for: the path of its shared file. */
  public String arena() {
    return arena;
  }

  /** Every chunk, in restore order. */
  public List<Entry> entries() {
    return entries;
  }

  /** The chunk's place, or null. */
  public Entry find(Digest digest) {
    return byDigest.get(digest);
  }

  /** Bytes of the distinct chunks placed. */
  public long bytes() {
    return byDigest.values().stream().mapToLong(Entry::length).sum();
  }

  /** How many runs of chunks are contiguous in the arena, in restore order: 1 is a perfect layout. */
  public int runs() {
    int runs = 0;
    long next = -1;
    for (Entry e : entries) {
      if (e.offset() != next) {
        runs++;
      }
      next = e.offset() + e.length();
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
    ByteBuffer b = ByteBuffer.allocate(12 + name.length + entries.size() * 44).order(ByteOrder.LITTLE_ENDIAN);
    b.putInt(MAGIC).putInt(name.length).put(name).putInt(entries.size());
    for (Entry e : entries) {
      b.put(e.digest().toBytes()).putLong(e.offset()).putInt(e.length());
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
      if (n < 0 || (long) n * 44 != b.remaining()) {
        throw new IllegalArgumentException("a chunk placement of " + n + " entries needs " + (44L * n) + " bytes, "
            + "not " + b.remaining());
      }
      List<Entry> entries = new ArrayList<>(n);
      byte[] digest = new byte[32];
      for (int i = 0; i < n; i++) {
        b.get(digest);
        long offset = b.getLong();
        int length = b.getInt();
        if (offset < 0 || length <= 0) {
          throw new IllegalArgumentException("entry " + i + " has offset " + offset + " and length " + length);
        }
        entries.add(new Entry(Digest.fromBytes(digest), offset, length));
      }
      return new ChunkPlacement(new String(name, StandardCharsets.UTF_8), entries);
    } catch (BufferUnderflowException | NegativeArraySizeException e) {
      throw new IllegalArgumentException("a chunk placement is cut short", e);
    }
  }

  @Override
  public String toString() {
    return "ChunkPlacement[" + arena + ", " + entries.size() + " chunks, " + bytes() + " bytes, " + runs() + " runs]";
  }
}
