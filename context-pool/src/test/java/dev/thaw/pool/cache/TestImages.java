package dev.thaw.pool.cache;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import java.nio.ByteBuffer;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;

/**
 * Images made for cache tests: allocations of random bytes cut into fixed chunks, stored in a real store, with a
 * manifest that names them. Allocations sit back to back from a base address, as a packed image's do.
 */
public final class TestImages {

  public static final long BASE = 0x7f0000000000L;

  private TestImages() {}

  /** Stores the chunks and returns the manifest; {@code sizes} are the allocations' sizes, named a0, a1, ... */
  public static ImageManifest image(ChunkStore store, long seed, int chunkBytes, List<String> firstAccess, long... sizes) {
    return image(store, seed, chunkBytes, firstAccess, null, BASE, sizes);
  }

  /** Like {@link #image(ChunkStore, long, int, List, long...)}, at {@code base}, with a written set. */
  public static ImageManifest image(ChunkStore store, long seed, int chunkBytes, List<String> firstAccess,
      List<String> written, long base, long... sizes) {
    Random r = new Random(seed);
    List<ImageManifest.Allocation> allocations = new ArrayList<>();
    long address = base;
    long total = 0;
    for (int i = 0; i < sizes.length; i++) {
      List<ImageManifest.Chunk> chunks = new ArrayList<>();
      for (long off = 0; off < sizes[i]; off += chunkBytes) {
        int len = (int) Math.min(chunkBytes, sizes[i] - off);
        byte[] data = new byte[len];
        r.nextBytes(data);
        Digest d = Digest.of(data);
        store.putChunk(d, ByteBuffer.wrap(data));
        chunks.add(new ImageManifest.Chunk(d, off, len));
      }
      allocations.add(new ImageManifest.Allocation("a" + i, address, sizes[i], chunks));
      address += (sizes[i] + 255) / 256 * 256;
      total += sizes[i];
    }
    return manifest(allocations, firstAccess, total, written);
  }

  /** An image whose allocations are {@code allocations}, as given. */
  public static ImageManifest manifest(List<ImageManifest.Allocation> allocations, List<String> firstAccess, long total) {
    return manifest(allocations, firstAccess, total, null);
  }

  /** An image whose profile says {@code written} were written (null: unknown). */
  public static ImageManifest manifest(List<ImageManifest.Allocation> allocations, List<String> firstAccess, long total,
      List<String> written) {
    JsonNodeFactory f = JsonNodeFactory.instance;
    ImageManifest.Profile profile = firstAccess.isEmpty() && written == null ? ImageManifest.Profile.empty()
        : new ImageManifest.Profile("recorded", 1, firstAccess, Map.of(), written);
    return new ImageManifest(ImageManifest.SCHEMA_VERSION, new ImageManifest.Function("test.Fn", f.objectNode()),
        new ImageManifest.Device("sim", "9.0", "sm_90", "sim"), allocations, List.of(), f.objectNode(), List.of(),
        new ImageManifest.Build(Instant.now().toString(), "test", 0, total, total, 0), profile);
  }

  /** The bytes of a chunk, read from the store. */
  public static byte[] chunk(ChunkStore store, Digest d) {
    ByteBuffer b = ByteBuffer.allocate(store.chunkSize(d).orElseThrow());
    store.readChunk(d, b);
    return b.array();
  }
}
