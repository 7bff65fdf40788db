package dev.thaw.image.registry;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.registry.ThawArtifact.Blob;
import dev.thaw.image.registry.ThawArtifact.ChunkRef;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.host.Threads;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * One image being pulled, blob by blob, in the image's first-access order ({@link ThawArtifact#pullOrder}: the
 * cubins, then the allocations in the order the build's profile first touched them), into a {@link ChunkStore}.
 * A lazy restore reads through it ({@link PullThroughStore}): {@link #awaitChunk} moves the blob holding a chunk
 * to the head of the queue and waits for it.
 *
 * <p>Invariants: a chunk enters the store only after its bytes hashed to its digest (and a pack's to the pack's);
 * the tag is committed — with the Thaw manifest and the chunk set that manifest names — only after every chunk
 * of the image is in the store. A pull that fails or is closed early commits nothing; chunks it stored are not
 * named by any manifest and go at the next garbage collection.
 *
 * <p>Thread-safe.
 */
public final class ImagePull implements AutoCloseable {

  /**
   * What a pull did.
   *
   * @param reference where it came from
   * @param tag the local tag it was committed under
   * @param manifestDigest the OCI manifest's digest
   * @param blobs blobs the artifact has (config, pack index, layers)
   * @param fetched layer blobs fetched (the others held only chunks the store had)
   * @param bytesDownloaded bytes received (manifests and blobs)
   * @param imageBytes bytes of the image's distinct chunks
   * @param layout {@code chunks} or {@code packs}
   * @param seconds wall time from open to commit
   */
  public record Result(String reference, String tag, Digest manifestDigest, int blobs, int fetched,
      long bytesDownloaded, long imageBytes, String layout, double seconds) {}

  private enum State { PENDING, RUNNING, DONE }

  private static final class Task {
    final Blob blob;
    final int rank;
    State state = State.PENDING;

    Task(Blob blob, int rank) {
      this.blob = blob;
      this.rank = rank;
    }
  }

  private final RegistryClient client;
  private final RegistryReference source;
  private final Digest manifestDigest;
  private final ChunkStore store;
  private final String tag;
  private final byte[] manifestBytes;
  private final ImageManifest manifest;
  private final boolean packed;
  private final int transfers;
  private final long startNanos;
  private final List<ChunkRef> order;
  private final int blobCount;
  private final long imageBytes;

  private final Object lock = new Object();
  private final List<Task> queue = new ArrayList<>();
  private final Deque<Task> urgent = new ArrayDeque<>();
  private final Map<Digest, Task> taskOf = new HashMap<>();
  private final List<Digest> arrivals = new ArrayList<>();
  private int cursor;
  private int remaining;
  private int fetched;
  private RuntimeException failure;
  private Result result;
  private boolean closed;
  private ExecutorService workers;
  private volatile ProgressListener progress = ProgressListener.NONE;

  ImagePull(RegistryClient client, RegistryReference source, Digest manifestDigest, ChunkStore store, String tag,
      byte[] manifestBytes, ImageManifest manifest, List<Blob> blobs, boolean packed, int transfers,
      long startNanos) {
    this.client = client;
    this.source = source;
    this.manifestDigest = manifestDigest;
    this.store = store;
    this.tag = tag;
    this.manifestBytes = manifestBytes.clone();
    this.manifest = manifest;
    this.packed = packed;
    this.transfers = transfers;
    this.startNanos = startNanos;
    this.order = ThawArtifact.pullOrder(manifest);
    this.blobCount = blobs.size() + (packed ? 2 : 1);
    Map<Digest, Integer> rankOf = new HashMap<>();
    long bytes = 0;
    for (int i = 0; i < order.size(); i++) {
      rankOf.put(order.get(i).digest(), i);
      bytes += order.get(i).length();
    }
    this.imageBytes = bytes;
    // A blob is due when its first-needed chunk is; blobs whose chunks the store has are never fetched.
    for (Blob b : blobs) {
      if (b.chunks().stream().allMatch(c -> store.contains(c.digest()))) {
        continue;
      }
      int rank = b.chunks().stream().mapToInt(c -> rankOf.get(c.digest())).min().orElseThrow();
      Task t = new Task(b, rank);
      queue.add(t);
      b.chunks().forEach(c -> taskOf.put(c.digest(), t));
    }
    queue.sort(Comparator.comparingInt(t -> t.rank));
    remaining = queue.size();
  }

  /** The Thaw manifest, checked. */
  public ImageManifest manifest() {
    return manifest;
  }

  /** The Thaw manifest's bytes, as committed. */
  public byte[] manifestBytes() {
    return manifestBytes.clone();
  }

  /** The local tag this pull commits. */
  public String tag() {
    return tag;
  }

  public RegistryReference source() {
    return source;
  }

  /** The image's distinct chunks in pull order. */
  public List<ChunkRef> order() {
    return order;
  }

  /** Chunks this pull stored so far, in the order they were stored. */
  public List<Digest> arrivals() {
    synchronized (lock) {
      return List.copyOf(arrivals);
    }
  }

  /** Moves the blob holding {@code chunk} to the head of the queue (no-op if fetched, running or unknown). */
  public void prioritize(Digest chunk) {
    synchronized (lock) {
      Task t = taskOf.get(chunk);
      if (t != null && t.state == State.PENDING && !urgent.contains(t)) {
        urgent.addFirst(t);
      }
    }
  }

  /** Starts fetching, with {@link RegistryOptions#transfers()} blobs at once. Returns this. */
  public ImagePull start() {
    return start(ProgressListener.NONE);
  }

  /**
   * {@link #start()}, telling {@code progress} of the bytes of each blob as it is stored (one phase, {@code pull},
   * of the blobs the store lacked), finished when the pull commits or fails.
   */
  public ImagePull start(ProgressListener progress) {
    synchronized (lock) {
      if (workers != null || closed) {
        return this;
      }
      this.progress = progress;
      progress.start("pull", queue.stream().mapToLong(t -> t.blob.size()).sum());
      workers = Executors.newFixedThreadPool(transfers, Threads.daemonFactory("thaw-pull"));
      if (remaining == 0) {
        workers.execute(this::commit);
      }
      for (int i = 0; i < Math.min(transfers, remaining); i++) {
        workers.execute(this::work);
      }
    }
    return this;
  }

  /**
   * Waits until {@code chunk} is in the store, moving it to the head of the queue first. Starts the pull if it
   * has not started.
   *
   * @throws IllegalArgumentException if the image does not name the chunk
   * @throws RegistryException the pull's failure, if it failed
   */
  public void awaitChunk(Digest chunk) {
    if (store.contains(chunk)) {
      return;
    }
    Task t;
    synchronized (lock) {
      t = taskOf.get(chunk);
    }
    if (t == null) {
      throw new IllegalArgumentException(source + " does not name chunk " + chunk);
    }
    prioritize(chunk);
    start();
    synchronized (lock) {
      while (t.state != State.DONE) {
        checkFailed();
        waitOnLock();
      }
    }
  }

  /** Waits for the whole image and its commit. Starts the pull if it has not started. */
  public Result await() {
    start();
    synchronized (lock) {
      while (result == null) {
        checkFailed();
        waitOnLock();
      }
      return result;
    }
  }

  private void checkFailed() {
    if (failure != null) {
      throw failure;
    }
    if (closed) {
      throw new RegistryException("the pull of " + source + " was closed before it finished", 0, null);
    }
  }

  private void waitOnLock() {
    try {
      lock.wait();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new RegistryException("interrupted while pulling " + source, 0, null, e);
    }
  }

  private Task next() {
    synchronized (lock) {
      if (failure != null || closed) {
        return null;
      }
      while (!urgent.isEmpty()) {
        Task t = urgent.pollFirst();
        if (t.state == State.PENDING) {
          t.state = State.RUNNING;
          return t;
        }
      }
      while (cursor < queue.size()) {
        Task t = queue.get(cursor++);
        if (t.state == State.PENDING) {
          t.state = State.RUNNING;
          return t;
        }
      }
      return null;
    }
  }

  private void work() {
    for (Task t = next(); t != null; t = next()) {
      try {
        fetch(t.blob);
      } catch (RuntimeException e) {
        fail(e);
        return;
      }
      progress.advance(t.blob.size());
      boolean last;
      synchronized (lock) {
        t.state = State.DONE;
        fetched++;
        last = --remaining == 0;
        lock.notifyAll();
      }
      if (last) {
        commit();
      }
    }
  }

  /** Fetches one blob, verifies it (and each chunk of a pack), and stores its chunks. */
  private void fetch(Blob blob) {
    byte[] bytes = client.getBlob(source.repository(), blob.digest(), blob.size());
    List<Digest> stored = new ArrayList<>(blob.chunks().size());
    int offset = 0;
    for (ChunkRef c : blob.chunks()) {
      ByteBuffer chunk = ByteBuffer.wrap(bytes, offset, c.length()).slice();
      offset += c.length();
      if (packed) {
        Digest actual = Digest.of(chunk);
        if (!actual.equals(c.digest())) {
          throw new CorruptBlobException("pack " + blob.digest() + " holds bytes that hash to " + actual + " where "
              + "its index says chunk " + c.digest(), c.digest());
        }
      }
      store.putChunk(c.digest(), chunk);
      stored.add(c.digest());
    }
    synchronized (lock) {
      arrivals.addAll(stored);
    }
  }

  private void commit() {
    synchronized (lock) {
      if (closed || failure != null) {
        return;
      }
    }
    try {
      store.sync();
      store.commit(tag, manifestBytes, manifest.chunkDigests());
    } catch (RuntimeException e) {
      fail(e);
      return;
    }
    progress.finish();
    synchronized (lock) {
      result = new Result(source.toString(), tag, manifestDigest, blobCount, fetched, client.bytesDownloaded(),
          imageBytes, packed ? "packs" : "chunks", (System.nanoTime() - startNanos) / 1e9);
      lock.notifyAll();
    }
  }

  private void fail(RuntimeException e) {
    progress.finish();
    synchronized (lock) {
      if (failure == null) {
        failure = e;
      }
      lock.notifyAll();
    }
  }

  /** Bytes received so far. */
  public long bytesDownloaded() {
    return client.bytesDownloaded();
  }

  /** Stops fetching; if the image was not committed yet, it never is. Idempotent. */
  @Override
  public void close() {
    ExecutorService w;
    synchronized (lock) {
      closed = true;
      w = workers;
      lock.notifyAll();
    }
    if (w != null) {
      w.shutdownNow();
    }
    client.close();
  }

  @Override
  public String toString() {
    return "ImagePull[" + source + " -> " + tag + "]";
  }

}
