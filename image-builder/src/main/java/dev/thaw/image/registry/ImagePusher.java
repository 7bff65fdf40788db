package dev.thaw.image.registry;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.InvalidManifestException;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.store.ChunkNotFoundException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.image.registry.ThawArtifact.Blob;
import dev.thaw.image.registry.ThawArtifact.ChunkRef;
import dev.thaw.runtime.host.Threads;
import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Pushes an image from a {@link ChunkStore} to a registry as a {@link ThawArtifact}: every blob first, the
 * manifest last, so the reference never names a blob the registry lacks.
 *
 * <p>Per blob: {@code HEAD} (the registry has it: skipped), else a mount from each {@link
 * RegistryOptions#mountFrom()} repository, else an upload of the bytes read from the store (which verifies them
 * when it verifies reads). {@link RegistryOptions#transfers()} blobs move at once.
 */
public final class ImagePusher {

  private final RegistryOptions options;

  public ImagePusher(RegistryOptions options) {
    this.options = new RegistryOptions(options);
  }

  /**
   * What a push did.
   *
   * @param reference where the image went
   * @param manifestDigest the OCI manifest's digest: {@code reference@digest} names this exact image
   * @param blobs blobs the artifact has (config, pack index, layers)
   * @param existing blobs the registry had already
   * @param mounted blobs mounted from another repository
   * @param uploaded blobs uploaded
   * @param bytesUploaded blob bytes sent (every attempt)
   * @param imageBytes bytes of the image's distinct chunks
   * @param layout {@code chunks} or {@code packs}
   * @param manifestBytes the OCI manifest's size
   * @param seconds wall time
   */
  public record Result(String reference, Digest manifestDigest, int blobs, int existing, int mounted, int uploaded,
      long bytesUploaded, long imageBytes, String layout, int manifestBytes, double seconds) {}

  /**
   * Pushes the image {@code tag} names to {@code target}.
   *
   * @throws ImageNotFoundException if no image has that tag
   * @throws ChunkNotFoundException if the store lacks a chunk the image names
   * @throws ManifestTooLargeException if the manifest would pass {@link RegistryOptions#maxManifestBytes()} in
   *     the layout asked for, or the registry refuses its size
   * @throws RegistryException for any other refusal, after retries
   */
  public Result push(ChunkStore store, String tag, RegistryReference target) {
    return push(store, tag, target, ProgressListener.NONE);
  }

  /**
   * {@link #push(ChunkStore, String, RegistryReference)}, telling {@code progress} of its layers' bytes as each is
   * done (uploaded, found in the registry or mounted): one phase, {@code push}.
   */
  public Result push(ChunkStore store, String tag, RegistryReference target, ProgressListener progress) {
    long start = System.nanoTime();
    byte[] config = store.manifest(tag).orElseThrow(() -> new ImageNotFoundException(tag));
    ImageManifest m;
    try {
      m = ImageManifest.read(config);
    } catch (InvalidManifestException e) {
      throw new InvalidManifestException("image '" + tag + "': " + e.getMessage(), e);
    }
    List<ChunkRef> order = ThawArtifact.pullOrder(m);
    long imageBytes = 0;
    for (ChunkRef c : order) {
      int size = store.chunkSize(c.digest()).orElseThrow(() -> new ChunkNotFoundException(c.digest()));
      if (size != c.length()) {
        throw new InvalidManifestException("image '" + tag + "': chunk " + c.digest() + " has " + size
            + " bytes in the store; the manifest says " + c.length());
      }
      imageBytes += size;
    }
    Digest configDigest = Digest.of(config);

    List<Blob> chunkLayers = order.stream().map(Blob::chunk).toList();
    byte[] chunkManifest = ThawArtifact.ociManifest(m, configDigest, config.length, chunkLayers, null);
    boolean packed = switch (options.blobLayout()) {
      case CHUNKS -> false;
      case PACKS -> true;
      case AUTO -> chunkManifest.length > options.maxManifestBytes();
    };
    if (!packed && chunkManifest.length > options.maxManifestBytes()) {
      throw new ManifestTooLargeException("a manifest of one layer per chunk would have " + chunkManifest.length
          + " bytes, over the " + options.maxManifestBytes() + " allowed: push with packs", 0, chunkManifest.length,
          options.maxManifestBytes());
    }

    String repo = target.repository();
    progress.start("push", imageBytes);
    try (RegistryClient client = new RegistryClient(target.registry(), options)) {
      Counts counts = new Counts();
      ExecutorService pool = Executors.newFixedThreadPool(options.transfers(), Threads.daemonFactory("thaw-push"));
      List<Blob> layers;
      try {
        List<Future<Blob>> futures = new ArrayList<>();
        if (packed) {
          for (List<ChunkRef> pack : ThawArtifact.packs(order, options.packMinBytes(), options.packMaxBytes())) {
            futures.add(pool.submit(() -> {
              Blob b = pushPack(client, store, repo, pack, counts);
              progress.advance(b.size());
              return b;
            }));
          }
        } else {
          for (Blob b : chunkLayers) {
            futures.add(pool.submit(() -> {
              pushBlob(client, repo, b.digest(), () -> List.of(readChunk(store, b.chunks().get(0))), counts);
              progress.advance(b.size());
              return b;
            }));
          }
        }
        layers = new ArrayList<>(futures.size());
        for (Future<Blob> f : futures) {
          layers.add(await(f));
        }
      } finally {
        pool.shutdownNow();
      }
      Blob index = null;
      if (packed) {
        byte[] indexBytes = ThawArtifact.packIndex(layers);
        index = new Blob(ThawArtifact.PACK_INDEX_TYPE, Digest.of(indexBytes), indexBytes.length, List.of());
        pushBlob(client, repo, index.digest(), () -> List.of(indexBytes), counts);
      }
      pushBlob(client, repo, configDigest, () -> List.of(config), counts);
      byte[] oci = packed ? ThawArtifact.ociManifest(m, configDigest, config.length, layers, index) : chunkManifest;
      if (oci.length > options.maxManifestBytes()) {
        throw new ManifestTooLargeException("even packed, the manifest has " + oci.length + " bytes, over the "
            + options.maxManifestBytes() + " allowed", 0, oci.length, options.maxManifestBytes());
      }
      Digest manifestDigest = client.putManifest(repo, target.tag() != null ? target.tag()
          : target.digest().toString(), oci, ThawArtifact.OCI_MANIFEST);
      if (target.digest() != null && !target.digest().equals(manifestDigest)) {
        throw new RegistryException("pushed manifest " + manifestDigest + ", not the " + target.digest()
            + " the reference names", 0, null);
      }
      return new Result(target.toString(), manifestDigest, layers.size() + (packed ? 2 : 1), counts.existing.get(),
          counts.mounted.get(), counts.uploaded.get(), client.bytesUploaded(), imageBytes,
          packed ? "packs" : "chunks", oci.length, (System.nanoTime() - start) / 1e9);
    } finally {
      progress.finish();
    }
  }

  private static final class Counts {
    final AtomicInteger existing = new AtomicInteger();
    final AtomicInteger mounted = new AtomicInteger();
    final AtomicInteger uploaded = new AtomicInteger();
  }

  @FunctionalInterface
  private interface Bytes {
    List<byte[]> read();
  }

  private void pushBlob(RegistryClient client, String repo, Digest digest, Bytes bytes, Counts counts) {
    if (client.blobSize(repo, digest).isPresent()) {
      counts.existing.incrementAndGet();
      return;
    }
    for (String from : options.mountFrom()) {
      if (!from.equals(repo) && client.mountBlob(repo, digest, from)) {
        counts.mounted.incrementAndGet();
        return;
      }
    }
    client.uploadBlob(repo, digest, bytes.read());
    counts.uploaded.incrementAndGet();
  }

  private Blob pushPack(RegistryClient client, ChunkStore store, String repo, List<ChunkRef> pack, Counts counts) {
    List<byte[]> parts = new ArrayList<>(pack.size());
    MessageDigest sha = Digest.sha256();
    long size = 0;
    for (ChunkRef c : pack) {
      byte[] b = readChunk(store, c);
      sha.update(b);
      parts.add(b);
      size += b.length;
    }
    Digest digest = Digest.fromBytes(sha.digest());
    pushBlob(client, repo, digest, () -> parts, counts);
    return new Blob(ThawArtifact.PACK_TYPE, digest, size, pack);
  }

  private static byte[] readChunk(ChunkStore store, ChunkRef c) {
    byte[] b = new byte[c.length()];
    int n = store.readChunk(c.digest(), ByteBuffer.wrap(b));
    if (n != c.length()) {
      throw new IllegalStateException("chunk " + c.digest() + " read " + n + " bytes, not " + c.length());
    }
    return b;
  }

  private static <T> T await(Future<T> f) {
    try {
      return f.get();
    } catch (ExecutionException e) {
      if (e.getCause() instanceof RuntimeException r) {
        throw r;
      }
      throw new RegistryException("push failed: " + e.getCause(), 0, null, e.getCause());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new RegistryException("push interrupted", 0, null, e);
    }
  }
}
