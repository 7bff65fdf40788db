package dev.thaw.image.archive;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.ImageVerifier;
import dev.thaw.image.InvalidManifestException;
import dev.thaw.image.store.ChunkNotFoundException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.Tags;
import dev.thaw.runtime.host.IoErrors;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermission;
import java.security.MessageDigest;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;

/**
 * One image as one portable file: a tar holding an OCI image layout ({@code oci-layout}, {@code index.json},
 * {@code blobs/sha256/<hex>}). The OCI manifest's config blob is the Thaw manifest (opaque here) and its
 * layers are the image's chunks, so the layout can be pushed to an OCI registry as is (e.g. {@code oras
 * copy --from-oci-layout}). Layout details: {@code docs/image-store.md}.
 */
public final class ImageArchive {

  public static final String OCI_MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json";
  public static final String OCI_INDEX_TYPE = "application/vnd.oci.image.index.v1+json";
  /** Media types as ModelPack and KitOps shape theirs (docs/image-format.md); the registry uses the same. */
  public static final String ARTIFACT_TYPE = "application/vnd.thaw.image.manifest.v1+json";
  public static final String THAW_MANIFEST_TYPE = "application/vnd.thaw.image.config.v1+json";
  public static final String CHUNK_TYPE = "application/vnd.thaw.image.chunk.v1.raw";
  public static final String REF_NAME = "org.opencontainers.image.ref.name";
  /** An index or manifest bigger than this is not one we wrote. */
  private static final long MAX_JSON = 64L << 20;

  private static final ObjectMapper JSON = new ObjectMapper();

  /** What an import did. */
  public record Imported(String tag, Digest manifest, int chunks, int newChunks, long newBytes) {}

  private ImageArchive() {}

  /**
   * Writes the image {@code tag} names to {@code file}: a new file, or a regular file it replaces. It writes a
   * temporary file beside it, syncs it and renames it over the name, so a failed export leaves no partial
   * archive; a new archive gets the umask's mode, a replaced one keeps its mode.
   *
   * @return the number of bytes written
   * @throws ImageNotFoundException if the tag is not in the store
   * @throws ArchiveException if {@code file} is a symbolic link, a directory or a special file, or its
   *     directory is missing or not writable, or the write fails; nothing is left behind
   */
  public static long export(RocksChunkStore store, String tag, Path file) {
    Tags.check(tag);
    byte[] manifest = store.manifest(tag).orElseThrow(() -> new ImageNotFoundException(tag));
    List<Digest> chunks = store.chunksOf(tag).orElseThrow();
    Digest manifestDigest = Digest.of(manifest);

    ObjectNode oci = JSON.createObjectNode();
    oci.put("schemaVersion", 2);
    oci.put("mediaType", OCI_MANIFEST_TYPE);
    oci.put("artifactType", ARTIFACT_TYPE);
    oci.set("config", descriptor(THAW_MANIFEST_TYPE, manifestDigest, manifest.length));
    ArrayNode layers = oci.putArray("layers");
    Map<Digest, Integer> sizes = new HashMap<>();
    int largest = 0;
    for (Digest d : chunks) {
      int size = store.chunkSize(d).orElseThrow(() -> new ChunkNotFoundException(d));
      sizes.put(d, size);
      largest = Math.max(largest, size);
      layers.add(descriptor(CHUNK_TYPE, d, size));
    }
    oci.putObject("annotations").put(REF_NAME, tag);
    byte[] ociBytes = json(oci);
    Digest ociDigest = Digest.of(ociBytes);

    ObjectNode index = JSON.createObjectNode();
    index.put("schemaVersion", 2);
    index.put("mediaType", OCI_INDEX_TYPE);
    ObjectNode entry = descriptor(OCI_MANIFEST_TYPE, ociDigest, ociBytes.length);
    entry.putObject("annotations").put(REF_NAME, tag);
    index.putArray("manifests").add(entry);

    Path target = file.toAbsolutePath();
    Optional<Set<PosixFilePermission>> keep = checkTarget(target);
    Path tmp = target.resolveSibling(".thaw-export-" + Long.toHexString(System.nanoTime()) + ".tmp");
    try {
      long written;
      // No permission attribute: the file gets 0666 less the umask, as any file the user's tools make.
      try (FileChannel out = FileChannel.open(tmp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
        writeEntry(out, "oci-layout", ByteBuffer.wrap(bytes("{\"imageLayoutVersion\":\"1.0.0\"}")));
        writeEntry(out, "index.json", ByteBuffer.wrap(json(index)));
        writeEntry(out, blobName(ociDigest), ByteBuffer.wrap(ociBytes));
        writeEntry(out, blobName(manifestDigest), ByteBuffer.wrap(manifest));
        ByteBuffer buf = ByteBuffer.allocateDirect(Math.max(largest, 1));
        for (Digest d : chunks) {
          buf.clear();
          store.readChunk(d, buf); // verifies when the store does: a corrupt chunk never leaves the store
          buf.flip();
          writeEntry(out, blobName(d), buf);
        }
        writeFully(out, Tar.end());
        out.force(true);
        written = out.size();
      }
      if (keep.isPresent()) {
        Files.setPosixFilePermissions(tmp, keep.get());
      }
      checkTarget(target); // again: rename replaces whatever entry has the name by now, never through it
      Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE);
      tmp = null;
      syncDirectory(target.getParent());
      return written;
    } catch (IOException e) {
      throw new ArchiveException("cannot export to " + target + ": " + IoErrors.describe(e), e);
    } finally {
      if (tmp != null) {
        try {
          Files.deleteIfExists(tmp);
        } catch (IOException ignored) {
          // best effort
        }
      }
    }
  }

  /**
   * What an export may write to: a new path in an existing, writable directory, or a regular file (whose mode
   * it keeps). A symbolic link, a directory, a device or any other special file is refused, not replaced.
   *
   * @return the permissions of the regular file there, if there is one
   */
  private static Optional<Set<PosixFilePermission>> checkTarget(Path target) {
    String refused = "cannot export to " + target + ": ";
    if (Files.isSymbolicLink(target)) {
      throw new ArchiveException(refused + "it is a symbolic link; name a new file or a regular file");
    }
    if (Files.exists(target, LinkOption.NOFOLLOW_LINKS)) {
      if (Files.isDirectory(target, LinkOption.NOFOLLOW_LINKS)) {
        throw new ArchiveException(refused + "it is a directory; name the archive file");
      }
      if (!Files.isRegularFile(target, LinkOption.NOFOLLOW_LINKS)) {
        throw new ArchiveException(refused + "it is a device or special file, not a regular file");
      }
      try {
        return Optional.of(Files.getPosixFilePermissions(target, LinkOption.NOFOLLOW_LINKS));
      } catch (IOException | UnsupportedOperationException e) {
        return Optional.empty();
      }
    }
    Path dir = target.getParent();
    if (!Files.isDirectory(dir)) {
      throw new ArchiveException(refused + dir + (Files.exists(dir) ? " is not a directory" : " does not exist"));
    }
    if (!Files.isWritable(dir)) {
      throw new ArchiveException(refused + "cannot write to " + dir + " (permission denied)");
    }
    return Optional.empty();
  }

  private static void syncDirectory(Path dir) {
    try (FileChannel d = FileChannel.open(dir, StandardOpenOption.READ)) {
      d.force(true);
    } catch (IOException ignored) {
      // Not every file system can sync a directory; the archive itself is synced.
    }
  }

  /**
   * Imports an archive: first checks all of it — every header, every blob's digest, the index, the manifests,
   * and that every chunk the image names is in the archive or already in the store — and only then stores the
   * chunks and commits the tag. A truncated, tampered or incomplete archive fails with {@link
   * ArchiveException} before the store is written to. An existing tag of the same name is replaced.
   */
  public static Imported importArchive(ChunkStore store, Path file) {
    try (FileChannel in = FileChannel.open(file, StandardOpenOption.READ)) {
      List<Tar.Entry> entries = Tar.list(in);
      Map<String, Tar.Entry> byName = new HashMap<>();
      for (Tar.Entry e : entries) {
        if (byName.put(e.name(), e) != null) {
          throw new ArchiveException("the archive holds " + e.name() + " twice");
        }
      }
      // Pass 1: check everything; write nothing.
      Map<Digest, Tar.Entry> blobs = new HashMap<>();
      for (Tar.Entry e : entries) {
        if (e.name().startsWith("blobs/sha256/")) {
          Digest named;
          try {
            named = new Digest(e.name().substring("blobs/sha256/".length()));
          } catch (IllegalArgumentException ex) {
            throw new ArchiveException("the archive holds a blob with a bad name: " + e.name(), ex);
          }
          Digest actual = hash(in, e);
          if (!actual.equals(named)) {
            throw new ArchiveException("blob " + named + " is damaged: its bytes hash to " + actual);
          }
          blobs.put(named, e);
        }
      }
      JsonNode layout = parse(in, require(byName, "oci-layout"), "oci-layout");
      if (!"1.0.0".equals(layout.path("imageLayoutVersion").asText())) {
        throw new ArchiveException("unsupported OCI layout version " + layout.path("imageLayoutVersion"));
      }
      JsonNode index = parse(in, require(byName, "index.json"), "index.json");
      JsonNode manifests = index.path("manifests");
      if (!manifests.isArray() || manifests.size() != 1) {
        throw new ArchiveException("index.json must name exactly one image manifest");
      }
      JsonNode ref = manifests.get(0);
      String tag = ref.path("annotations").path(REF_NAME).asText("");
      try {
        Tags.check(tag);
      } catch (IllegalArgumentException e) {
        throw new ArchiveException("the archive's tag is invalid: " + e.getMessage(), e);
      }
      Tar.Entry ociEntry = blob(blobs, ref, "the image manifest");
      JsonNode oci = parse(in, ociEntry, "the image manifest");
      Tar.Entry configEntry = blob(blobs, oci.path("config"), "the Thaw manifest");
      if (configEntry.size() > MAX_JSON) {
        throw new ArchiveException("the Thaw manifest is implausibly large: " + configEntry.size() + " bytes");
      }
      byte[] manifest = new byte[(int) configEntry.size()];
      Tar.readFully(in, ByteBuffer.wrap(manifest), configEntry.dataOffset());
      // The chunk set comes from the Thaw manifest, never from the layers: the store keys it by the manifest's
      // digest, so a set that disagreed with the manifest would decide what GC keeps of another image.
      Map<Digest, Integer> named;
      try {
        named = ImageVerifier.chunkLengths(ImageManifest.read(manifest));
      } catch (InvalidManifestException e) {
        throw new ArchiveException("the archive's Thaw manifest is unreadable: " + e.getMessage(), e);
      }
      JsonNode layerList = oci.path("layers");
      if (!layerList.isArray()) {
        throw new ArchiveException("the image manifest has no layers array");
      }
      Set<Digest> chunks = new LinkedHashSet<>();
      int largest = 0;
      for (JsonNode layer : layerList) {
        Digest d = digestOf(layer);
        long size = layer.path("size").asLong(-1);
        if (!chunks.add(d)) {
          throw new ArchiveException("the image manifest's layers name chunk " + d + " twice");
        }
        Integer length = named.get(d);
        if (length == null) {
          throw new ArchiveException("the image manifest's layers name chunk " + d
              + ", which the Thaw manifest does not");
        }
        if (length != size) {
          throw new ArchiveException("the image manifest's layers give chunk " + d + " " + size
              + " bytes; the Thaw manifest says " + length);
        }
        Tar.Entry e = blobs.get(d);
        if (e != null) {
          if (e.size() != size) {
            throw new ArchiveException("chunk " + d + " has " + e.size() + " bytes; the manifest says " + size);
          }
          largest = (int) Math.max(largest, size);
        } else if (store.chunkSize(d).map(s -> s != size).orElse(true)) {
          throw new ArchiveException("the archive is incomplete: chunk " + d + " is neither in it nor in the store");
        }
      }
      if (!chunks.equals(named.keySet())) {
        Set<Digest> absent = new LinkedHashSet<>(named.keySet());
        absent.removeAll(chunks);
        throw new ArchiveException("the image manifest's layers leave out " + absent.size() + " of the "
            + named.size() + " chunks the Thaw manifest names, " + absent.iterator().next() + " first");
      }
      // Pass 2: store the chunks (re-checked: the file may have changed since pass 1), then commit.
      int newChunks = 0;
      long newBytes = 0;
      ByteBuffer buf = ByteBuffer.allocateDirect(Math.max(largest, 1));
      for (Digest d : chunks) {
        Tar.Entry e = blobs.get(d);
        if (e == null || store.contains(d)) {
          continue;
        }
        buf.clear().limit((int) e.size());
        Tar.readFully(in, buf, e.dataOffset());
        buf.flip();
        Digest actual = Digest.of(buf);
        if (!actual.equals(d)) {
          throw new ArchiveException("blob " + d + " changed while it was being imported");
        }
        store.putChunk(d, buf);
        newChunks++;
        newBytes += e.size();
      }
      store.commit(tag, manifest, chunks);
      return new Imported(tag, Digest.of(manifest), chunks.size(), newChunks, newBytes);
    } catch (IOException e) {
      throw new UncheckedIOException("cannot read the archive " + file + ": " + e.getMessage(), e);
    }
  }

  private static Tar.Entry require(Map<String, Tar.Entry> byName, String name) {
    Tar.Entry e = byName.get(name);
    if (e == null) {
      throw new ArchiveException("the archive has no " + name + ": not an image archive, or truncated");
    }
    return e;
  }

  private static Tar.Entry blob(Map<Digest, Tar.Entry> blobs, JsonNode descriptor, String what) {
    Digest d = digestOf(descriptor);
    Tar.Entry e = blobs.get(d);
    if (e == null) {
      throw new ArchiveException("the archive is incomplete: " + what + " " + d + " is missing");
    }
    if (descriptor.path("size").asLong(-1) != e.size()) {
      throw new ArchiveException(what + " " + d + " has " + e.size() + " bytes; its descriptor says "
          + descriptor.path("size"));
    }
    return e;
  }

  private static Digest digestOf(JsonNode descriptor) {
    try {
      return Digest.parse(descriptor.path("digest").asText(null));
    } catch (IllegalArgumentException e) {
      throw new ArchiveException("bad descriptor " + descriptor + ": " + e.getMessage(), e);
    }
  }

  private static JsonNode parse(FileChannel in, Tar.Entry e, String what) throws IOException {
    if (e.size() > MAX_JSON) {
      throw new ArchiveException(what + " is implausibly large: " + e.size() + " bytes");
    }
    byte[] b = new byte[(int) e.size()];
    Tar.readFully(in, ByteBuffer.wrap(b), e.dataOffset());
    try {
      return JSON.readTree(b);
    } catch (IOException ex) {
      throw new ArchiveException(what + " is not valid JSON: " + ex.getMessage(), ex);
    }
  }

  private static Digest hash(FileChannel in, Tar.Entry e) throws IOException {
    MessageDigest sha = Digest.sha256();
    ByteBuffer buf = ByteBuffer.allocate(1 << 20);
    long pos = e.dataOffset();
    long left = e.size();
    while (left > 0) {
      buf.clear().limit((int) Math.min(buf.capacity(), left));
      Tar.readFully(in, buf, pos);
      buf.flip();
      pos += buf.remaining();
      left -= buf.remaining();
      sha.update(buf);
    }
    return Digest.fromBytes(sha.digest());
  }

  private static ObjectNode descriptor(String mediaType, Digest digest, long size) {
    ObjectNode n = JSON.createObjectNode();
    n.put("mediaType", mediaType);
    n.put("digest", digest.toString());
    n.put("size", size);
    return n;
  }

  private static void writeEntry(FileChannel out, String name, ByteBuffer data) throws IOException {
    int size = data.remaining();
    writeFully(out, Tar.header(name, size));
    writeFully(out, data);
    writeFully(out, ByteBuffer.allocate(Tar.padding(size)));
  }

  private static void writeFully(FileChannel out, ByteBuffer b) throws IOException {
    while (b.hasRemaining()) {
      out.write(b);
    }
  }

  private static String blobName(Digest d) {
    return "blobs/sha256/" + d.hex();
  }

  private static byte[] json(JsonNode n) {
    try {
      return JSON.writeValueAsBytes(n);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  private static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }
}
