package dev.thaw.pool;

import dev.thaw.image.store.Digest;
import dev.thaw.pool.cache.ChunkPlacement;
import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * An image idle workers prepare before anyone asks for it ({@link ContextPool#prepare}): each parses its manifest,
 * plans its restore, loads its function class, reads its host state and loads its modules, so that becoming it
 * ({@link Worker#become(PreparedImage, ImageSource)}) is mapping memory and starting the copy stream.
 *
 * @param key names this manifest, byte for byte (e.g. its digest); a worker prepared under one key never serves
 *     another manifest
 * @param name the image's tag, for messages and status
 * @param manifest the manifest as stored
 * @param placement where the host cache holds its chunks now (the cubins are read from there, checked), or null
 *     to read them from the store
 * @param ranks for a group ({@link #group}), rank r's image at r, each with its placement; empty for an image
 */
public record PreparedImage(String key, String name, byte[] manifest, ChunkPlacement placement,
    List<PreparedImage> ranks) {

  public PreparedImage {
    if (key == null || key.isBlank() || name == null || manifest == null) {
      throw new IllegalArgumentException("a prepared image needs a key, a name and its manifest");
    }
    ranks = List.copyOf(ranks);
  }

  public PreparedImage(String key, String name, byte[] manifest, ChunkPlacement placement) {
    this(key, name, manifest, placement, List.of());
  }

  /**
   * A group a worker prepares whole ({@link Worker#becomeGroup}): a worker on device w prepares rank r for device
   * (w + r) mod the node's devices, in a context of its own there. Its key names every rank's; its manifest is rank
   * 0's.
   */
  public static PreparedImage group(String tag, List<PreparedImage> ranks) {
    if (ranks.size() < 2) {
      throw new IllegalArgumentException("a group has two ranks or more, not " + ranks.size());
    }
    ByteArrayOutputStream keys = new ByteArrayOutputStream();
    ranks.forEach(r -> keys.writeBytes(r.key().getBytes(StandardCharsets.UTF_8)));
    return new PreparedImage(tag + "@" + Digest.of(ByteBuffer.wrap(keys.toByteArray())), tag,
        ranks.get(0).manifest(), null, ranks);
  }

  public boolean isGroup() {
    return !ranks.isEmpty();
  }

  /** The key of {@code tag}'s image whose stored manifest is {@code manifest}: the tag and the manifest's digest. */
  public static String keyOf(String tag, byte[] manifest) {
    return tag + "@" + Digest.of(ByteBuffer.wrap(manifest));
  }
}
