package dev.thaw.pool;

import dev.thaw.image.store.Digest;
import dev.thaw.pool.cache.ChunkPlacement;
import java.nio.ByteBuffer;

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
 */
public record PreparedImage(String key, String name, byte[] manifest, ChunkPlacement placement) {

  public PreparedImage {
    if (key == null || key.isBlank() || name == null || manifest == null) {
      throw new IllegalArgumentException("a prepared image needs a key, a name and its manifest");
    }
  }

  /** The key of {@code tag}'s image whose stored manifest is {@code manifest}: the tag and the manifest's digest. */
  public static String keyOf(String tag, byte[] manifest) {
    return tag + "@" + Digest.of(ByteBuffer.wrap(manifest));
  }
}
