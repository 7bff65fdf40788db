package dev.thaw.image;

import dev.thaw.image.store.ChunkNotFoundException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A {@link ChunkStore} in memory for tests, honouring the interface's contract (idempotent puts, commit only of
 * stored chunks, GC by reachability), with hooks to damage a chunk and to fail puts.
 */
public final class MemoryChunkStore implements ChunkStore {

  private final Map<Digest, byte[]> chunks = new ConcurrentHashMap<>();
  private final Map<String, byte[]> manifests = new TreeMap<>();
  private final Map<String, Set<Digest>> references = new TreeMap<>();
  private final AtomicInteger puts = new AtomicInteger();
  private volatile int failPutsAfter = Integer.MAX_VALUE;
  private volatile boolean closed;

  /** Flips a byte of a stored chunk, as a damaged disk would. */
  public void corrupt(Digest digest) {
    byte[] b = chunks.get(digest);
    b[b.length / 2] ^= 0x5a;
  }

  /** Removes a chunk behind the store's back. */
  public void lose(Digest digest) {
    chunks.remove(digest);
  }

  /** Every put after the first {@code n} throws, as a full disk would. */
  public void failPutsAfter(int n) {
    failPutsAfter = n;
  }

  public int chunkCount() {
    return chunks.size();
  }

  public int puts() {
    return puts.get();
  }

  public boolean isClosed() {
    return closed;
  }

  @Override
  public boolean contains(Digest digest) {
    return chunks.containsKey(digest);
  }

  @Override
  public void putChunk(Digest digest, ByteBuffer data) {
    if (puts.incrementAndGet() > failPutsAfter) {
      throw new IllegalStateException("store is full (test)");
    }
    byte[] copy = new byte[data.remaining()];
    data.duplicate().get(copy);
    chunks.putIfAbsent(digest, copy);
  }

  @Override
  public void sync() {}

  @Override
  public Optional<Integer> chunkSize(Digest digest) {
    return Optional.ofNullable(chunks.get(digest)).map(b -> b.length);
  }

  @Override
  public int readChunk(Digest digest, ByteBuffer dst) {
    byte[] b = chunks.get(digest);
    if (b == null) {
      throw new ChunkNotFoundException(digest);
    }
    if (b.length > dst.remaining()) {
      throw new IllegalArgumentException("chunk of " + b.length + " bytes does not fit in " + dst.remaining());
    }
    dst.put(b);
    return b.length;
  }

  @Override
  public synchronized void commit(String tag, byte[] manifest, Set<Digest> names) {
    for (Digest d : names) {
      if (!chunks.containsKey(d)) {
        throw new ChunkNotFoundException(d);
      }
    }
    manifests.put(tag, manifest.clone());
    references.put(tag, Set.copyOf(names));
  }

  @Override
  public synchronized Optional<byte[]> manifest(String tag) {
    return Optional.ofNullable(manifests.get(tag)).map(byte[]::clone);
  }

  @Override
  public synchronized List<String> tags() {
    return new ArrayList<>(manifests.keySet());
  }

  @Override
  public synchronized boolean delete(String tag) {
    references.remove(tag);
    return manifests.remove(tag) != null;
  }

  @Override
  public synchronized GarbageCollection collectGarbage() {
    Set<Digest> live = new HashSet<>();
    references.values().forEach(live::addAll);
    long n = 0;
    long bytes = 0;
    for (Digest d : new ArrayList<>(chunks.keySet())) {
      if (!live.contains(d)) {
        bytes += chunks.remove(d).length;
        n++;
      }
    }
    return new GarbageCollection(n, bytes, bytes);
  }

  @Override
  public void close() {
    closed = true;
  }
}
