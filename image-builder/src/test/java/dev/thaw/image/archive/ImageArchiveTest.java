package dev.thaw.image.archive;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.archive.ArchiveException;
import dev.thaw.image.archive.ImageArchive;
import dev.thaw.image.archive.Tar;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.RocksChunkStoreTest;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import dev.thaw.image.ImageManifest;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
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
    chunks = new LinkedHashSet<>();
    List<byte[]> data = new ArrayList<>();
    try (RocksChunkStore s = RocksChunkStore.open(dir.resolve("source"))) {
      for (int i = 0; i < 5; i++) {
        data.add(RocksChunkStoreTest.random(i, 10_000 + 3_333 * i));
        chunks.add(RocksChunkStoreTest.put(s, data.get(i)));
      }
      manifest = manifestOf(data);
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

  /**
   * Import once trusted the OCI layers for the chunk list and commit overwrote the refs entry that the manifest
   * digest keys: an archive holding another image's manifest with no layers, under another tag, imported with
   * exit 0 and the next gc deleted the first image's chunks.
   */
  @Test
  void anArchiveWhoseLayersDisagreeWithItsManifestImportsNothingAndTheOtherImageKeepsItsChunks() throws Exception {
    Path target = dir.resolve("target");
    try (RocksChunkStore t = RocksChunkStore.open(target)) {
      ImageArchive.importArchive(t, archive);
    }
    List<Digest> some = new ArrayList<>(chunks).subList(0, 2);
    for (List<Digest> layers : List.of(List.<Digest>of(), some)) {
      Path forged = dir.resolve("forged-" + layers.size() + ".tar");
      writeArchive(forged, "other:v1", manifest, layers);
      try (RocksChunkStore t = RocksChunkStore.open(target)) {
        ArchiveException e = assertThrows(ArchiveException.class, () -> ImageArchive.importArchive(t, forged));
        assertTrue(e.getMessage().contains("layers"), e.getMessage());
        assertEquals(List.of("mlp:v1"), t.tags());
        assertEquals(0, t.collectGarbage().chunks(), "gc frees nothing the first image names");
        assertEquals(List.of(), t.verify());
        assertEquals(chunks.size(), t.chunkCount());
      }
    }
  }

  @Test
  void anArchiveWithAnUnreadableManifestImportsNothing() throws Exception {
    Path forged = dir.resolve("unreadable.tar");
    byte[] v2 = new String(manifest, StandardCharsets.UTF_8).replace("\"schemaVersion\" : 1", "\"schemaVersion\" : 2")
        .getBytes(StandardCharsets.UTF_8);
    writeArchive(forged, "mlp:v2", v2, new ArrayList<>(chunks));
    assertImportsNothing(forged, "schemaVersion 2");
  }

  /** A valid manifest whose one allocation is {@code data}, chunk after chunk. */
  static byte[] manifestOf(List<byte[]> data) {
    List<ImageManifest.Chunk> cs = new ArrayList<>();
    long offset = 0;
    for (byte[] b : data) {
      cs.add(new ImageManifest.Chunk(Digest.of(b), offset, b.length));
      offset += b.length;
    }
    var json = new ObjectMapper();
    return new ImageManifest(ImageManifest.SCHEMA_VERSION,
        new ImageManifest.Function("dev.example.Fn", json.createObjectNode()),
        new ImageManifest.Device("sim", "9.0", "sm_90", "sim"),
        List.of(new ImageManifest.Allocation("w", 0x7f0000200000L, offset, cs)), List.of(),
        json.createObjectNode(), List.of(), new ImageManifest.Build("2026-11-23T06:00:00Z", "0.1.0", 1, offset,
        offset, cs.size()), ImageManifest.Profile.empty()).toBytes();
  }

  /** An archive laid out as export writes one, with {@code layers} as the OCI layers, whatever the manifest says. */
  private void writeArchive(Path file, String tag, byte[] thawManifest, List<Digest> layers) throws Exception {
    Map<Digest, byte[]> bytes = new LinkedHashMap<>();
    try (RocksChunkStore s = RocksChunkStore.open(dir.resolve("source"))) {
      for (Digest d : layers) {
        ByteBuffer b = ByteBuffer.allocate(s.chunkSize(d).orElseThrow());
        s.readChunk(d, b);
        bytes.put(d, b.array());
      }
    }
    StringBuilder ls = new StringBuilder();
    for (Digest d : layers) {
      ls.append(ls.length() == 0 ? "" : ",").append(descriptor(ImageArchive.CHUNK_TYPE, d, bytes.get(d).length));
    }
    Digest md = Digest.of(thawManifest);
    byte[] oci = ("{\"schemaVersion\":2,\"mediaType\":\"" + ImageArchive.OCI_MANIFEST_TYPE + "\",\"config\":"
        + descriptor(ImageArchive.THAW_MANIFEST_TYPE, md, thawManifest.length) + ",\"layers\":[" + ls + "]}")
        .getBytes(StandardCharsets.UTF_8);
    Digest od = Digest.of(oci);
    byte[] index = ("{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" + ImageArchive.OCI_MANIFEST_TYPE
        + "\",\"digest\":\"" + od + "\",\"size\":" + oci.length + ",\"annotations\":{\"" + ImageArchive.REF_NAME
        + "\":\"" + tag + "\"}}]}").getBytes(StandardCharsets.UTF_8);
    try (FileChannel out = FileChannel.open(file,
        StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
      entry(out, "oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}".getBytes(StandardCharsets.UTF_8));
      entry(out, "index.json", index);
      entry(out, "blobs/sha256/" + od.hex(), oci);
      entry(out, "blobs/sha256/" + md.hex(), thawManifest);
      for (Map.Entry<Digest, byte[]> e : bytes.entrySet()) {
        entry(out, "blobs/sha256/" + e.getKey().hex(), e.getValue());
      }
      out.write(Tar.end());
    }
  }

  private static String descriptor(String type, Digest d, long size) {
    return "{\"mediaType\":\"" + type + "\",\"digest\":\"" + d + "\",\"size\":" + size + "}";
  }

  private static void entry(FileChannel out, String name, byte[] data) throws Exception {
    out.write(Tar.header(name, data.length));
    out.write(ByteBuffer.wrap(data));
    out.write(ByteBuffer.allocate(Tar.padding(data.length)));
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
