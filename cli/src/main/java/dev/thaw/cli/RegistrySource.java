package dev.thaw.cli;

import dev.thaw.image.registry.ImagePull;
import dev.thaw.image.registry.ImagePuller;
import dev.thaw.image.registry.PullThroughStore;
import dev.thaw.image.registry.RegistryReference;
import dev.thaw.image.store.ChunkStore;
import picocli.CommandLine.Model.CommandSpec;

/**
 * What a restore reads when it is given a tag or a registry reference: the store and the tag as they are, or a
 * pull started from the reference with the store read through it ({@link PullThroughStore}), so the restore
 * begins once the manifests are in and takes the chunks it needs first. Closing waits for the pull to commit
 * the image (under the reference's default local tag), so the next run finds it in the store.
 */
final class RegistrySource implements AutoCloseable {

  private final ChunkStore store;
  private final String tag;
  private final ImagePull pull;

  private RegistrySource(ChunkStore store, String tag, ImagePull pull) {
    this.store = store;
    this.tag = tag;
    this.pull = pull;
  }

  static RegistrySource open(ThawCli cli, ChunkStore store, String tagOrRef, RegistryOption options,
      CommandSpec spec) {
    if (!RegistryReference.looksLikeReference(tagOrRef)) {
      return new RegistrySource(store, tagOrRef, null);
    }
    RegistryReference ref = RegistryOption.parse(tagOrRef, spec);
    String local = ref.defaultLocalTag();
    ImagePull pull = new ImagePuller(options.options(cli, ref, spec)).open(ref, store, local);
    return new RegistrySource(new PullThroughStore(store, pull), local, pull.start());
  }

  ChunkStore store() {
    return store;
  }

  String tag() {
    return tag;
  }

  /** The pull's result once committed, or null for a local tag. */
  ImagePull.Result finish() {
    return pull == null ? null : pull.await();
  }

  @Override
  public void close() {
    if (pull != null) {
      pull.close();
    }
  }
}
