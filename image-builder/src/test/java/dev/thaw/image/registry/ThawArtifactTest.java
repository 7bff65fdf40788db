package dev.thaw.image.registry;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.registry.ThawArtifact.Blob;
import dev.thaw.image.registry.ThawArtifact.ChunkRef;
import dev.thaw.image.store.Digest;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * Pins the artifact layout: the pull order (cubins, then first access, then the rest), content-defined packs
 * within their bounds that survive an insertion, the manifest round trip, and the sizes that make a 16 GB image
 * need packs (the numbers docs/image-format.md quotes).
 */
class ThawArtifactTest {

  static final int AVG_CHUNK = 256 << 10;

  private static Digest digest(long i) {
    return Digest.of(ByteBuffer.allocate(8).putLong(0, i));
  }

  /** A structurally valid manifest of {@code allocations} allocations of {@code chunksEach} chunks. */
  static ImageManifest manifest(int allocations, int chunksEach, int chunkBytes, List<String> firstAccess,
      boolean cubin) {
    List<ImageManifest.Allocation> allocs = new ArrayList<>();
    long id = 0;
    long total = 0;
    for (int a = 0; a < allocations; a++) {
      List<ImageManifest.Chunk> chunks = new ArrayList<>();
      for (int c = 0; c < chunksEach; c++) {
        chunks.add(new ImageManifest.Chunk(digest(id++), (long) c * chunkBytes, chunkBytes));
      }
      allocs.add(new ImageManifest.Allocation("layer" + a + ".weight", 0x7f0000000000L + ((long) a << 32),
          (long) chunksEach * chunkBytes, chunks));
      total += (long) chunksEach * chunkBytes;
    }
    List<ImageManifest.Module> modules = cubin ? List.of(new ImageManifest.Module("m", "sm_90",
        new ImageManifest.Blob(digest(-1), 4096), ".version 8.0", List.of())) : List.of();
    return new ImageManifest(ImageManifest.SCHEMA_VERSION,
        new ImageManifest.Function("com.example.Fn", JsonNodeFactory.instance.objectNode()),
        new ImageManifest.Device("NVIDIA H200", "9.0", "sm_90", "cuda"), allocs, modules,
        JsonNodeFactory.instance.objectNode(), List.of(),
        new ImageManifest.Build("2026-11-23T00:00:00Z", "test", 1, total, total, (int) id),
        new ImageManifest.Profile("recorded", 1, firstAccess, Map.of()));
  }

  @Test
  void thePullOrderIsCubinsThenFirstAccessThenTheRest() {
    ImageManifest m = manifest(3, 2, 1000, List.of("layer2.weight", "layer0.weight"), true);
    List<Digest> order = ThawArtifact.pullOrder(m).stream().map(ChunkRef::digest).toList();
    assertEquals(List.of(digest(-1), digest(4), digest(5), digest(0), digest(1), digest(2), digest(3)), order);
  }

  @Test
  void packsStayWithinTheirBoundsAndMostSurviveAnInsertion() {
    List<ChunkRef> chunks = new ArrayList<>();
    for (int i = 0; i < 4000; i++) {
      chunks.add(new ChunkRef(digest(i), 1000 + i % 7 * 100));
    }
    List<List<ChunkRef>> packs = ThawArtifact.packs(chunks, 20_000, 80_000);
    assertEquals(chunks, packs.stream().flatMap(List::stream).toList());
    for (int i = 0; i < packs.size(); i++) {
      int bytes = packs.get(i).stream().mapToInt(ChunkRef::length).sum();
      assertTrue(bytes <= 80_000, "pack " + i + " has " + bytes);
      assertTrue(bytes >= 20_000 || i == packs.size() - 1, "pack " + i + " has " + bytes);
    }
    List<ChunkRef> edited = new ArrayList<>(chunks);
    edited.add(2000, new ChunkRef(digest(99_999), 1234));
    List<List<ChunkRef>> after = ThawArtifact.packs(edited, 20_000, 80_000);
    long same = after.stream().filter(packs::contains).count();
    assertTrue(same >= packs.size() - 3, same + " of " + packs.size() + " packs survive one inserted chunk");
  }

  @Test
  void aPackedArtifactReadsBackToTheSameBlobsAndMustCoverTheManifest() {
    ImageManifest m = manifest(2, 50, 1000, List.of(), false);
    List<Blob> packs = new ArrayList<>();
    for (List<ChunkRef> p : ThawArtifact.packs(ThawArtifact.pullOrder(m), 5000, 20_000)) {
      packs.add(new Blob(ThawArtifact.PACK_TYPE, digest(packs.size() + 1000), p.size() * 1000L, p));
    }
    byte[] index = ThawArtifact.packIndex(packs);
    Blob indexBlob = new Blob(ThawArtifact.PACK_INDEX_TYPE, Digest.of(index), index.length, List.of());
    byte[] oci = ThawArtifact.ociManifest(m, digest(7), 123, packs, indexBlob);
    ThawArtifact.Parsed parsed = ThawArtifact.parse(oci);
    assertTrue(parsed.packed());
    assertEquals(packs, ThawArtifact.blobs(parsed, index));
    ThawArtifact.checkCovers(m, packs);
    assertThrows(InvalidArtifactException.class, () -> ThawArtifact.checkCovers(m, packs.subList(1, packs.size())));
    assertThrows(InvalidArtifactException.class, () -> ThawArtifact.parse(
        new String(oci, StandardCharsets.UTF_8).replace(ThawArtifact.CONFIG_TYPE,
            "application/vnd.oci.image.config.v1+json").getBytes(StandardCharsets.UTF_8)));
  }

  /**
   * A 16 GB image cut at FastCDC's 256 KiB average: 61,040 chunks. One layer per chunk makes an OCI manifest of
   * 9.3 MB, past the 4 MiB that registries accept; packs of 4-32 MiB (1,958 of 7.8 MiB on average) bring it to
   * 0.30 MB, with a 6.4 MB pack index blob.
   */
  @Test
  void aSixteenGigabyteImageNeedsPacksAndPacksFitWithRoom() {
    int chunksEach = (int) Math.ceil(1e9 / AVG_CHUNK); // 16 allocations of about 1 GB
    ImageManifest m = manifest(16, chunksEach, AVG_CHUNK, List.of(), false);
    assertTrue(m.totalBytes() >= 16_000_000_000L, "image of " + m.totalBytes() + " bytes");
    byte[] thaw = m.toBytes();
    List<ChunkRef> order = ThawArtifact.pullOrder(m);
    byte[] chunkManifest = ThawArtifact.ociManifest(m, Digest.of(thaw), thaw.length,
        order.stream().map(Blob::chunk).toList(), null);
    assertTrue(chunkManifest.length > RegistryOptions.DEFAULT_MAX_MANIFEST_BYTES, chunkManifest.length + " bytes");

    List<Blob> packs = new ArrayList<>();
    for (List<ChunkRef> p : ThawArtifact.packs(order, RegistryOptions.DEFAULT_PACK_MIN_BYTES,
        RegistryOptions.DEFAULT_PACK_MAX_BYTES)) {
      packs.add(new Blob(ThawArtifact.PACK_TYPE, digest(packs.size() + 10_000_000L),
          p.stream().mapToLong(ChunkRef::length).sum(), p));
    }
    byte[] index = ThawArtifact.packIndex(packs);
    Blob indexBlob = new Blob(ThawArtifact.PACK_INDEX_TYPE, Digest.of(index), index.length, List.of());
    byte[] packed = ThawArtifact.ociManifest(m, Digest.of(thaw), thaw.length, packs, indexBlob);
    assertTrue(packed.length < RegistryOptions.DEFAULT_MAX_MANIFEST_BYTES / 10, packed.length + " bytes");
    System.out.printf("16 GB image: %d chunks, Thaw manifest %d B, one layer per chunk %d B, %d packs (avg %.1f MiB)"
        + " -> manifest %d B + pack index %d B%n", order.size(), thaw.length, chunkManifest.length, packs.size(),
        m.totalBytes() / (double) packs.size() / (1 << 20), packed.length, index.length);
  }
}
