package dev.thaw.image.registry;

import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Optional;
import java.util.Set;

/**
 * A {@link ChunkStore} that a restore reads while an {@link ImagePull} fills it: the pull's tag resolves to the
 * pulled Thaw manifest at once, and reading a chunk the store does not have yet moves it to the head of the pull
 * and waits for it. Everything else goes to the store underneath. Closing it closes neither.
 *
 * <p>This is how a restore starts from a registry reference before the image has arrived: the restore's own
 * order pulls what it needs first, and the pull's order (first access) fetches the rest behind it.
 */
public final class PullThroughStore implements ChunkStore {

  private final ChunkStore store;
  private final ImagePull pull;

  public PullThroughStore(ChunkStore store, ImagePull pull) {
    this.store = store;
    this.pull = pull;
  }

  @Override
  public boolean contains(Digest digest) {
    return store.contains(digest);
  }

  @Override
  public void putChunk(Digest digest, ByteBuffer data) {
    store.putChunk(digest, data);
  }

  @Override
  public void sync() {
    store.sync();
  }

  @Override
  public Optional<Integer> chunkSize(Digest digest) {
    return store.chunkSize(digest);
  }

  @Override
  public int readChunk(Digest digest, ByteBuffer dst) {
    if (!store.contains(digest)) {
      pull.awaitChunk(digest);
    }
    return store.readChunk(digest, dst);
  }

  @Override
  public int readChunkUnchecked(Digest digest, ByteBuffer dst) {
    if (!store.contains(digest)) {
      pull.awaitChunk(digest);
    }
    return store.readChunkUnchecked(digest, dst);
  }

  @Override
  public void commit(String tag, byte[] manifest, Set<Digest> chunks) {
    store.commit(tag, manifest, chunks);
  }

  @Override
  public Optional<byte[]> manifest(String tag) {
    return tag.equals(pull.tag()) ? Optional.of(pull.manifestBytes()) : store.manifest(tag);
  }

  @Override
  public List<String> tags() {
    return store.tags();
  }

  @Override
  public boolean delete(String tag) {
    return store.delete(tag);
  }

  @Override
  public GarbageCollection collectGarbage() {
    throw new UnsupportedOperationException("no garbage collection while a pull is filling the store");
  }

  @Override
  public void close() {
    // The store and the pull belong to the caller.
  }
}
