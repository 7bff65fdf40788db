package dev.thaw.image.store;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Pins export/import: a faithful round trip, and nothing imported from a damaged archive. */
class ImageArchiveTest {

  @TempDir Path dir;
  private Path archive;
  private byte[] manifest;
  private Set<Digest> chunks;

  @BeforeEach
  void exportOne() throws Exception {
    archive = dir.resolve("mlp.tar");
    manifest = "{\"format\":1,\"allocations\":[]}".getBytes(StandardCharsets.UTF_8);
    chunks = new LinkedHashSet<>();
    try (RocksChunkStore s = RocksChunkStore.open(dir.resolve("source"))) {
      for (int i = 0; i < 5; i++) {
        chunks.add(RocksChunkStoreTest.put(s, RocksChunkStoreTest.random(i, 10_000 + 3_333 * i)));
      }
      RocksChunkStoreTest.put(s, RocksChunkStoreTest.random(77, 1000)); // not in the image
      s.commit("mlp:v1", manifest, chunks);
      long size = ImageArchive.export(s, "mlp:v1", archive);
      assertEquals(Files.size(archive), size);
    }
  }

  @Test
  void roundTripsIntoAFreshStore() throws Exception {
    try (RocksChunkStore t = RocksChunkStore.open(dir.resolve("target"))) {
      ImageArchive.Imported r = ImageArchive.importArchive(t, archive);
      assertEquals(new ImageArchive.Imported("mlp:v1", Digest.of(manifest), 5, 5, r.newBytes()), r);
      assertEquals(List.of("mlp:v1"), t.tags());
      assertArrayEquals(manifest, t.manifest("mlp:v1").orElseThrow());
      assertEquals(5, t.chunkCount());
      assertEquals(List.of(), t.verify());
      for (Digest d : chunks) {
        t.readChunk(d, ByteBuffer.allocateDirect(30_000));
      }
      // Importing again stores nothing new; exporting again gives the same bytes.
      assertEquals(0, ImageArchive.importArchive(t, archive).newChunks());
      Path again = dir.resolve("again.tar");
      ImageArchive.export(t, "mlp:v1", again);
      assertArrayEquals(Files.readAllBytes(archive), Files.readAllBytes(again));
    }
  }

  @Test
  void theArchiveIsAnOciLayout() throws Exception {
    String text = new String(Files.readAllBytes(archive), StandardCharsets.ISO_8859_1);
    assertTrue(text.startsWith("oci-layout"));
    assertTrue(text.contains("\"imageLayoutVersion\":\"1.0.0\""));
    assertTrue(text.contains("index.json"));
    for (Digest d : chunks) {
      assertTrue(text.contains("blobs/sha256/" + d.hex()));
    }
    assertTrue(text.contains(ImageArchive.OCI_MANIFEST_TYPE));
  }

  @Test
  void aTruncatedArchiveImportsNothing() throws Exception {
    byte[] whole = Files.readAllBytes(archive);
    for (int cut : new int[] {whole.length - 1, whole.length - 1024, whole.length / 2, 700, 100}) {
      Path bad = dir.resolve("cut-" + cut + ".tar");
      Files.write(bad, Arrays.copyOf(whole, cut));
      assertImportsNothing(bad, "truncated");
    }
  }

  @Test
  void aTamperedChunkImportsNothing() throws Exception {
    byte[] whole = Files.readAllBytes(archive);
    Digest victim = chunks.iterator().next();
    int at = new String(whole, StandardCharsets.ISO_8859_1).indexOf("blobs/sha256/" + victim.hex());
    whole[at + 512 + 100] ^= 0x40; // a byte of its data, past the header
    Path bad = dir.resolve("tampered.tar");
    Files.write(bad, whole);
    assertImportsNothing(bad, "blob " + victim + " is damaged");
  }

  @Test
  void aTamperedHeaderImportsNothing() throws Exception {
    byte[] whole = Files.readAllBytes(archive);
    whole[3] ^= 0x01; // the first entry's name
    Path bad = dir.resolve("header.tar");
    Files.write(bad, whole);
    assertImportsNothing(bad, "checksum mismatch");
  }

  private void assertImportsNothing(Path bad, String why) {
    try (RocksChunkStore t = RocksChunkStore.open(dir.resolve("target"))) {
      ArchiveException e = assertThrows(ArchiveException.class, () -> ImageArchive.importArchive(t, bad));
      assertTrue(e.getMessage().contains(why), e.getMessage());
      assertEquals(List.of(), t.tags());
      assertEquals(0, t.chunkCount(), "no chunk stored before the whole archive checked out");
    }
  }
}
