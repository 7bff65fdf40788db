package dev.thaw.image;

import dev.thaw.image.store.ChunkHashMismatchException;
import dev.thaw.image.store.ChunkNotFoundException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.StoreException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** Checks that every chunk an image names is stored and hashes to its name. Reads everything; does not repair. */
public final class ImageVerifier {

  /**
   * One chunk that failed.
   *
   * @param digest its name
   * @param problem {@code missing}, or what is wrong with its bytes
   */
  public record Damage(Digest digest, String problem) {}

  /**
   * What a verify found.
   *
   * @param tag the image
   * @param chunks distinct chunks checked
   * @param bytes their bytes
   * @param damage the chunks that failed, empty when the image is whole
   */
  public record Report(String tag, int chunks, long bytes, List<Damage> damage) {
    public boolean ok() {
      return damage.isEmpty();
    }
  }

  private final ChunkStore store;

  public ImageVerifier(ChunkStore store) {
    this.store = store;
  }

  /** The distinct chunks of an image and their lengths, cubins included. */
  public static Map<Digest, Integer> chunkLengths(ImageManifest m) {
    Map<Digest, Integer> lengths = new LinkedHashMap<>();
    m.allocations().forEach(a -> a.chunks().forEach(c -> lengths.put(c.digest(), c.length())));
    m.modules().forEach(x -> lengths.put(x.cubin().digest(), x.cubin().length()));
    return lengths;
  }

  /**
   * Reads and hashes every chunk of {@code tag}; a chunk that is missing, does not hash to its name or cannot be
   * read at all is recorded and the rest are still read.
   */
  public Report verify(String tag, ProgressListener progress) {
    ImageManifest m = Images.manifest(store, tag);
    Map<Digest, Integer> lengths = chunkLengths(m);
    long total = lengths.values().stream().mapToLong(Integer::longValue).sum();
    List<Damage> damage = new ArrayList<>();
    progress.start("verify " + tag, total);
    try {
      lengths.forEach((digest, length) -> {
        ByteBuffer b = ByteBuffer.allocate(length);
        try {
          int n = store.readChunk(digest, b);
          Digest actual = Digest.of(b.flip());
          if (n != length) {
            damage.add(new Damage(digest, "holds " + n + " bytes, the image says " + length));
          } else if (!actual.equals(digest)) {
            damage.add(new Damage(digest, "its bytes hash to " + actual));
          }
        } catch (ChunkNotFoundException e) {
          damage.add(new Damage(digest, "missing"));
        } catch (ChunkHashMismatchException e) {
          damage.add(new Damage(digest, "its bytes hash to " + e.actual()));
        } catch (StoreException e) {
          // The store's own checks (a blob or block checksum) caught the damage before the hash could.
          damage.add(new Damage(digest, "unreadable: " + e.getMessage()));
        } catch (IllegalArgumentException e) {
          damage.add(new Damage(digest, "holds more than the " + length + " bytes the image says"));
        }
        progress.advance(length);
      });
    } finally {
      progress.finish();
    }
    return new Report(tag, lengths.size(), total, damage);
  }
}
