package dev.thaw.image.registry;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ImageVerifier;
import dev.thaw.image.store.Digest;
import dev.thaw.image.archive.ImageArchive;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * A Thaw image as an OCI artifact (an OCI image manifest with our {@code artifactType}, as ModelPack and KitOps
 * package models): the config blob is the Thaw manifest, and the layers are the image's chunks, each its own blob
 * (its SHA-256 already is its OCI digest) — or, when that many layer descriptors would make the OCI manifest pass
 * {@link RegistryOptions#maxManifestBytes()}, <em>packs</em> of consecutive chunks, described by a pack index
 * blob as the first layer. Either way the layers are listed in pull order ({@link #pullOrder}). Media types and
 * the pack rule: {@code docs/image-format.md}.
 */
public final class ThawArtifact {

  public static final String OCI_MANIFEST = RegistryClient.OCI_MANIFEST;
  public static final String ARTIFACT_TYPE = ImageArchive.ARTIFACT_TYPE;
  public static final String CONFIG_TYPE = ImageArchive.THAW_MANIFEST_TYPE;
  public static final String CHUNK_TYPE = ImageArchive.CHUNK_TYPE;
  public static final String PACK_TYPE = "application/vnd.thaw.image.pack.v1.raw";
  public static final String PACK_INDEX_TYPE = "application/vnd.thaw.image.packindex.v1+json";
  /** A config (Thaw manifest) or pack index bigger than this is not one Thaw wrote. */
  static final long MAX_JSON_BLOB = 256L << 20;
  /** One pack in 16 ends at a chunk whose digest's first byte is a multiple of 16, once past the minimum. */
  private static final int PACK_BOUNDARY_MASK = 0x0f;

  private static final ObjectMapper JSON = new ObjectMapper();

  private ThawArtifact() {}

  /** One chunk: its digest and length. */
  public record ChunkRef(Digest digest, int length) {}

  /**
   * One blob of the artifact.
   *
   * @param mediaType {@link #CHUNK_TYPE} or {@link #PACK_TYPE}
   * @param digest its digest (a chunk blob's is the chunk's)
   * @param size its length in bytes
   * @param chunks the chunks it holds, in order (one for a chunk blob)
   */
  public record Blob(String mediaType, Digest digest, long size, List<ChunkRef> chunks) {
    public Blob {
      chunks = List.copyOf(chunks);
    }

    static Blob chunk(ChunkRef c) {
      return new Blob(CHUNK_TYPE, c.digest(), c.length(), List.of(c));
    }
  }

  /**
   * The image's distinct chunks in the order a lazy pull fetches them: the cubins (a restore loads modules
   * before it copies memory), then the allocations in the profile's first-access order, then the allocations the
   * profile never saw, in manifest order; each allocation's chunks by offset.
   *
   * @throws IllegalArgumentException if one digest is given two lengths (a manifest that could not be built)
   */
  public static List<ChunkRef> pullOrder(ImageManifest m) {
    Map<Digest, ChunkRef> order = new LinkedHashMap<>();
    m.modules().forEach(x -> add(order, new ChunkRef(x.cubin().digest(), x.cubin().length())));
    Map<String, ImageManifest.Allocation> byName = new LinkedHashMap<>();
    m.allocations().forEach(a -> byName.put(a.name(), a));
    Set<String> seen = new HashSet<>();
    for (String name : m.profile().firstAccessOrder()) {
      ImageManifest.Allocation a = byName.get(name);
      if (a != null && seen.add(name)) {
        a.chunks().forEach(c -> add(order, new ChunkRef(c.digest(), c.length())));
      }
    }
    for (ImageManifest.Allocation a : m.allocations()) {
      if (seen.add(a.name())) {
        a.chunks().forEach(c -> add(order, new ChunkRef(c.digest(), c.length())));
      }
    }
    return List.copyOf(order.values());
  }

  private static void add(Map<Digest, ChunkRef> order, ChunkRef c) {
    ChunkRef before = order.putIfAbsent(c.digest(), c);
    if (before != null && before.length() != c.length()) {
      throw new IllegalArgumentException("chunk " + c.digest() + " appears with lengths " + before.length() + " and "
          + c.length());
    }
  }

  /**
   * Cuts {@code chunks} into packs: a pack ends after a chunk once it holds at least {@code minBytes} and the
   * chunk's digest marks a boundary (one in 16), or before a chunk that would take it past {@code maxBytes}.
   * Boundaries depend only on the chunks, so two images that share a run of chunks share most of its packs.
   */
  public static List<List<ChunkRef>> packs(List<ChunkRef> chunks, int minBytes, int maxBytes) {
    List<List<ChunkRef>> packs = new ArrayList<>();
    List<ChunkRef> current = new ArrayList<>();
    long bytes = 0;
    for (ChunkRef c : chunks) {
      if (!current.isEmpty() && bytes + c.length() > maxBytes) {
        packs.add(current);
        current = new ArrayList<>();
        bytes = 0;
      }
      current.add(c);
      bytes += c.length();
      if (bytes >= minBytes && (c.digest().toBytes()[0] & PACK_BOUNDARY_MASK) == 0) {
        packs.add(current);
        current = new ArrayList<>();
        bytes = 0;
      }
    }
    if (!current.isEmpty()) {
      packs.add(current);
    }
    return packs;
  }

  /** The OCI manifest: config = the Thaw manifest; layers = {@code layers} (pack index first when packed). */
  public static byte[] ociManifest(ImageManifest m, Digest configDigest, long configSize, List<Blob> layers,
      Blob packIndex) {
    ObjectNode oci = JSON.createObjectNode();
    oci.put("schemaVersion", 2);
    oci.put("mediaType", OCI_MANIFEST);
    oci.put("artifactType", ARTIFACT_TYPE);
    oci.set("config", descriptor(CONFIG_TYPE, configDigest, configSize));
    ArrayNode array = oci.putArray("layers");
    if (packIndex != null) {
      array.add(descriptor(PACK_INDEX_TYPE, packIndex.digest(), packIndex.size()));
    }
    layers.forEach(b -> array.add(descriptor(b.mediaType(), b.digest(), b.size())));
    ObjectNode annotations = oci.putObject("annotations");
    annotations.put("org.opencontainers.image.created", m.build().created());
    annotations.put("dev.thaw.image.function", m.function().className());
    annotations.put("dev.thaw.image.bytes", Long.toString(m.totalBytes()));
    return write(oci);
  }

  /** The pack index: per pack, its digest, size and chunks, in layer order. */
  public static byte[] packIndex(List<Blob> packs) {
    ObjectNode root = JSON.createObjectNode();
    root.put("schemaVersion", 1);
    ArrayNode array = root.putArray("packs");
    for (Blob p : packs) {
      ObjectNode n = array.addObject();
      n.put("digest", p.digest().toString());
      n.put("size", p.size());
      ArrayNode chunks = n.putArray("chunks");
      for (ChunkRef c : p.chunks()) {
        chunks.addObject().put("digest", c.digest().toString()).put("length", c.length());
      }
    }
    return write(root);
  }

  // ------------------------------------------------------------------------------------------------ reading

  /** A descriptor as the OCI manifest gives it. */
  public record Descriptor(String mediaType, Digest digest, long size) {}

  /**
   * An OCI manifest read back: the config's descriptor, the pack index's (null when the chunks are their own
   * blobs), and the other layers.
   */
  public record Parsed(Descriptor config, Descriptor packIndex, List<Descriptor> layers) {
    public boolean packed() {
      return packIndex != null;
    }
  }

  /**
   * Reads and checks an OCI manifest: schema 2, our artifact type and config type, layers of our types only.
   *
   * @throws InvalidArtifactException naming what is wrong
   */
  public static Parsed parse(byte[] ociManifest) {
    JsonNode oci;
    try {
      oci = JSON.readTree(ociManifest);
    } catch (IOException e) {
      throw new InvalidArtifactException("the OCI manifest is not JSON: " + e.getMessage());
    }
    if (oci == null || !oci.isObject() || oci.path("schemaVersion").asInt() != 2) {
      throw new InvalidArtifactException("not an OCI image manifest (schemaVersion 2)");
    }
    String mediaType = oci.path("mediaType").asText(OCI_MANIFEST);
    if (!mediaType.equals(OCI_MANIFEST)) {
      throw new InvalidArtifactException("the manifest is " + mediaType + ", not " + OCI_MANIFEST
          + " (an index or a Docker manifest is not a Thaw image)");
    }
    Descriptor config = descriptor(oci.path("config"), "config");
    String artifactType = oci.path("artifactType").asText("");
    if (!artifactType.equals(ARTIFACT_TYPE) && !config.mediaType().equals(CONFIG_TYPE)) {
      throw new InvalidArtifactException("not a Thaw image: artifactType '" + artifactType + "', config "
          + config.mediaType() + " (a Thaw image has " + ARTIFACT_TYPE + ")");
    }
    if (!config.mediaType().equals(CONFIG_TYPE)) {
      throw new InvalidArtifactException("the config is " + config.mediaType() + ", not " + CONFIG_TYPE);
    }
    if (config.size() > MAX_JSON_BLOB) {
      throw new InvalidArtifactException("the Thaw manifest is implausibly large: " + config.size() + " bytes");
    }
    List<Descriptor> layers = new ArrayList<>();
    Descriptor index = null;
    JsonNode array = oci.path("layers");
    for (int i = 0; i < array.size(); i++) {
      Descriptor d = descriptor(array.get(i), "layers[" + i + "]");
      if (i == 0 && d.mediaType().equals(PACK_INDEX_TYPE)) {
        if (d.size() > MAX_JSON_BLOB) {
          throw new InvalidArtifactException("the pack index is implausibly large: " + d.size() + " bytes");
        }
        index = d;
      } else if (d.mediaType().equals(index != null ? PACK_TYPE : CHUNK_TYPE)) {
        layers.add(d);
      } else {
        throw new InvalidArtifactException("layers[" + i + "] is " + d.mediaType() + "; expected "
            + (index != null ? PACK_TYPE : CHUNK_TYPE));
      }
    }
    return new Parsed(config, index, layers);
  }

  /**
   * The artifact's blobs in layer order: from the pack index when packed (each pack's chunks summing to its
   * descriptor's size), else one chunk per layer.
   */
  public static List<Blob> blobs(Parsed parsed, byte[] packIndex) {
    List<Blob> out = new ArrayList<>();
    if (!parsed.packed()) {
      for (Descriptor d : parsed.layers()) {
        if (d.size() > Integer.MAX_VALUE) {
          throw new InvalidArtifactException("chunk " + d.digest() + " has " + d.size() + " bytes");
        }
        out.add(Blob.chunk(new ChunkRef(d.digest(), (int) d.size())));
      }
      return out;
    }
    JsonNode packs;
    try {
      packs = JSON.readTree(packIndex).path("packs");
    } catch (IOException e) {
      throw new InvalidArtifactException("the pack index is not JSON: " + e.getMessage());
    }
    if (!packs.isArray() || packs.size() != parsed.layers().size()) {
      throw new InvalidArtifactException("the pack index describes " + packs.size() + " packs; the manifest lists "
          + parsed.layers().size());
    }
    for (int i = 0; i < packs.size(); i++) {
      Descriptor d = parsed.layers().get(i);
      JsonNode p = packs.get(i);
      if (!d.digest().toString().equals(p.path("digest").asText()) || d.size() != p.path("size").asLong(-1)) {
        throw new InvalidArtifactException("pack " + i + " of the index is not layer " + (i + 1) + " (" + d.digest()
            + ")");
      }
      List<ChunkRef> chunks = new ArrayList<>();
      long sum = 0;
      for (JsonNode c : p.path("chunks")) {
        int length = c.path("length").asInt(-1);
        Digest digest;
        try {
          digest = Digest.parse(c.path("digest").asText(null));
        } catch (IllegalArgumentException e) {
          throw new InvalidArtifactException("pack " + d.digest() + ": " + e.getMessage());
        }
        if (length <= 0) {
          throw new InvalidArtifactException("pack " + d.digest() + ": chunk " + digest + " has length " + length);
        }
        chunks.add(new ChunkRef(digest, length));
        sum += length;
      }
      if (sum != d.size()) {
        throw new InvalidArtifactException("pack " + d.digest() + " has " + d.size() + " bytes; its chunks add up to "
            + sum);
      }
      out.add(new Blob(PACK_TYPE, d.digest(), d.size(), chunks));
    }
    return out;
  }

  /**
   * Checks that the blobs hold exactly the chunks the Thaw manifest names, each once and with the manifest's
   * length — the rule {@code thaw import} applies to an archive's layers ({@link ImageVerifier#chunkLengths}): the
   * chunk set a pull commits comes from the Thaw manifest, never from the layers.
   */
  public static void checkCovers(ImageManifest m, List<Blob> blobs) {
    Map<Digest, Integer> wanted = ImageVerifier.chunkLengths(m);
    Set<Digest> have = new LinkedHashSet<>();
    for (Blob b : blobs) {
      for (ChunkRef c : b.chunks()) {
        Integer length = wanted.get(c.digest());
        if (length == null) {
          throw new InvalidArtifactException("blob " + b.digest() + " holds chunk " + c.digest()
              + ", which the Thaw manifest does not name");
        }
        if (length != c.length()) {
          throw new InvalidArtifactException("chunk " + c.digest() + " has " + c.length() + " bytes in blob "
              + b.digest() + "; the Thaw manifest says " + length);
        }
        if (!have.add(c.digest())) {
          throw new InvalidArtifactException("the layers hold chunk " + c.digest() + " twice");
        }
      }
    }
    for (Digest d : wanted.keySet()) {
      if (!have.contains(d)) {
        throw new InvalidArtifactException("the artifact is incomplete: chunk " + d + " is in no layer");
      }
    }
  }

  private static Descriptor descriptor(JsonNode n, String where) {
    if (!n.isObject()) {
      throw new InvalidArtifactException(where + " is not a descriptor");
    }
    String mediaType = n.path("mediaType").asText(null);
    long size = n.path("size").asLong(-1);
    if (mediaType == null || size < 0) {
      throw new InvalidArtifactException(where + " needs a mediaType and a size: " + n);
    }
    try {
      return new Descriptor(mediaType, Digest.parse(n.path("digest").asText(null)), size);
    } catch (IllegalArgumentException e) {
      throw new InvalidArtifactException(where + ": " + e.getMessage());
    }
  }

  private static ObjectNode descriptor(String mediaType, Digest digest, long size) {
    ObjectNode n = JSON.createObjectNode();
    n.put("mediaType", mediaType);
    n.put("digest", digest.toString());
    n.put("size", size);
    return n;
  }

  private static byte[] write(JsonNode n) {
    try {
      return JSON.writeValueAsBytes(n);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }
}
