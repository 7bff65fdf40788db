package dev.thaw.image;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.store.Digest;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;
import org.junit.jupiter.api.Test;

/** Pins the manifest's JSON form and that reading it rejects every malformed field by name. */
class ImageManifestTest {

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Digest A = Digest.of(new byte[] {1});
  private static final Digest B = Digest.of(new byte[] {2});
  private static final Digest CUBIN = Digest.of(new byte[] {3});

  static ImageManifest sample() {
    return new ImageManifest(1,
        new ImageManifest.Function("dev.example.Fn", JSON.createObjectNode().put("n", 4)),
        new ImageManifest.Device("NVIDIA H200", "9.0", "sm_90", "cuda"),
        List.of(new ImageManifest.Allocation("w", 0x7f0000200000L, 300,
            List.of(new ImageManifest.Chunk(A, 0, 200), new ImageManifest.Chunk(B, 200, 100)))),
        List.of(new ImageManifest.Module("m", "sm_90", new ImageManifest.Blob(CUBIN, 1234), ".version 8.0",
            List.of(new ImageManifest.Kernel("k", 16, List.of(new ImageManifest.Param("p0", 0, 8, "INT64"),
                new ImageManifest.Param("p1", 8, 4, "INT32")))))),
        JSON.createObjectNode().put("w", "w"),
        List.of(),
        new ImageManifest.Build("2026-11-21T10:00:00Z", "0.1.0", 12.5, 300, 1534, 3),
        ImageManifest.Profile.empty());
  }

  @Test
  void roundTripsThroughJsonWithAddressesInHexAndDigestsInOciForm() throws Exception {
    ImageManifest m = sample();
    byte[] bytes = m.toBytes();
    String text = new String(bytes, StandardCharsets.UTF_8);
    assertTrue(text.contains("\"address\" : \"0x7f0000200000\""), text);
    assertTrue(text.contains("\"digest\" : \"" + A + "\""), text);
    assertTrue(text.contains("\"profile\" : {"), text);
    assertTrue(text.startsWith("{\n  \"schemaVersion\" : 1,"), text);
    assertEquals(m, ImageManifest.read(bytes));
    assertEquals(List.of(A, B, CUBIN), List.copyOf(m.chunkDigests()));
  }

  @Test
  void anotherSchemaVersionIsRefusedFirst() {
    String e = problem(t -> t.put("schemaVersion", 2).remove("allocations"));
    assertEquals("the manifest has schemaVersion 2; this Thaw reads schemaVersion 1", e);
    assertEquals("the manifest has no integer schemaVersion", problem(t -> t.remove("schemaVersion")));
    // read's one-pass path must not accept what Jackson would coerce to an integer.
    assertEquals("the manifest has no integer schemaVersion", problem(t -> t.put("schemaVersion", "1")));
    assertEquals("the manifest has no integer schemaVersion", problem(t -> t.put("schemaVersion", 1.0)));
  }

  @Test
  void everyBadFieldIsNamed() {
    Map<String, Consumer<ObjectNode>> cases = Map.of(
        "manifest field profile", t -> t.remove("profile"),
        "manifest field allocations[0].chunks[1].offset", t -> chunk(t, 1).put("offset", 201),
        "manifest field allocations[0].chunks", t -> chunk(t, 1).put("length", 50),
        "manifest field allocations[0].chunks[0].digest", t -> chunk(t, 0).put("digest", "md5:00"),
        "manifest field allocations[0].address", t -> alloc(t).put("address", "123"),
        "manifest field device.smArch", t -> ((ObjectNode) t.get("device")).put("smArch", "hopper"),
        "manifest field modules[0].arch", t -> ((ObjectNode) t.get("modules").get(0)).put("arch", "sm_80"),
        "manifest field build.totalBytes", t -> ((ObjectNode) t.get("build")).put("totalBytes", 7),
        "manifest field build.created", t -> ((ObjectNode) t.get("build")).put("created", "yesterday"),
        "manifest field extra", t -> t.put("extra", 1));
    cases.forEach((expected, damage) -> {
      String e = problem(damage);
      assertTrue(e.startsWith(expected), expected + " <- " + e);
    });
  }

  @Test
  void notJsonIsSaidPlainly() {
    InvalidManifestException e = assertThrows(InvalidManifestException.class,
        () -> ImageManifest.read("{oops".getBytes(StandardCharsets.UTF_8)));
    assertTrue(e.getMessage().startsWith("the manifest is not JSON"), e.getMessage());
  }

  private static ObjectNode alloc(ObjectNode t) {
    return (ObjectNode) t.get("allocations").get(0);
  }

  private static ObjectNode chunk(ObjectNode t, int i) {
    return (ObjectNode) ((ArrayNode) alloc(t).get("chunks")).get(i);
  }

  private static String problem(Consumer<ObjectNode> damage) {
    try {
      ObjectNode tree = (ObjectNode) JSON.readTree(sample().toBytes());
      damage.accept(tree);
      byte[] bytes = JSON.writeValueAsBytes(tree);
      return assertThrows(InvalidManifestException.class, () -> ImageManifest.read(bytes)).getMessage();
    } catch (IOException e) {
      throw new AssertionError(e);
    }
  }
}
