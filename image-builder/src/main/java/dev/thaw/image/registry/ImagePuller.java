package dev.thaw.image.registry;

import dev.thaw.image.ProgressListener;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.InvalidManifestException;
import dev.thaw.image.registry.ThawArtifact.Blob;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.Tags;
import java.util.List;

/**
 * Pulls images from a registry into a {@link ChunkStore}. {@link #open} reads and checks the OCI manifest, the
 * Thaw manifest (with {@link ImageManifest#read}: the same checks as a store's own) and the pack index, and
 * returns an {@link ImagePull} that fetches the blobs in the image's first-access order once started; {@link
 * #pull} is open, start and wait.
 */
public final class ImagePuller {

  private final RegistryOptions options;

  public ImagePuller(RegistryOptions options) {
    this.options = new RegistryOptions(options);
  }

  /** Pulls the image at {@code source} and commits it under {@code tag}. */
  public ImagePull.Result pull(RegistryReference source, ChunkStore store, String tag) {
    return pull(source, store, tag, ProgressListener.NONE);
  }

  /** {@link #pull(RegistryReference, ChunkStore, String)}, telling {@code progress} of the blob bytes fetched. */
  public ImagePull.Result pull(RegistryReference source, ChunkStore store, String tag, ProgressListener progress) {
    try (ImagePull pull = open(source, store, tag)) {
      return pull.start(progress).await();
    }
  }

  /**
   * Reads the manifests; fetches no chunk yet.
   *
   * @throws InvalidArtifactException if the reference names something that is not a Thaw image
   * @throws InvalidManifestException if its Thaw manifest does not read
   * @throws ManifestTooLargeException if its OCI manifest passes {@link RegistryOptions#maxManifestBytes()}
   * @throws RegistryException if the registry refuses or fails, after retries
   */
  public ImagePull open(RegistryReference source, ChunkStore store, String tag) {
    Tags.check(tag);
    long start = System.nanoTime();
    RegistryClient client = new RegistryClient(source.registry(), options);
    String repo = source.repository();
    RegistryClient.Manifest oci = client.getManifest(repo, source.manifestReference(), options.maxManifestBytes());
    ThawArtifact.Parsed parsed = ThawArtifact.parse(oci.bytes());
    byte[] config = client.getBlob(repo, parsed.config().digest(), parsed.config().size());
    ImageManifest manifest;
    try {
      manifest = ImageManifest.read(config);
    } catch (InvalidManifestException e) {
      throw new InvalidManifestException(source + ": " + e.getMessage(), e);
    }
    byte[] index = parsed.packed() ? client.getBlob(repo, parsed.packIndex().digest(), parsed.packIndex().size())
        : null;
    List<Blob> blobs = ThawArtifact.blobs(parsed, index);
    ThawArtifact.checkCovers(manifest, blobs);
    return new ImagePull(client, source, oci.digest(), store, tag, config, manifest, blobs, parsed.packed(),
        options.transfers(), start);
  }

  /** The digest a reference resolves to now, e.g. to pin a tag before a lazy restore. */
  public Digest resolve(RegistryReference source) {
    try (RegistryClient client = new RegistryClient(source.registry(), options)) {
      return client.getManifest(source.repository(), source.manifestReference(), options.maxManifestBytes())
          .digest();
    }
  }
}
