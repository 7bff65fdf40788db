package dev.thaw.image.restore;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionSession;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * Checks a restore against its image: reads every allocation back from the device and re-hashes each chunk's
 * bytes against the manifest's digest, so a pass means the device memory is byte-identical to the snapshot.
 * Costs a full device-to-host pass: for proving a restore path, not for serving.
 */
public final class RestoreCheck {

  /** What a check found: bytes compared, and the chunks whose device bytes differ from their digests. */
  public record Result(long bytes, int chunks, List<String> mismatches) {

    public boolean identical() {
      return mismatches.isEmpty();
    }
  }

  private RestoreCheck() {}

  /** Compares the device memory of {@code restored} with the chunks its manifest names. */
  public static Result deviceMemory(RestoredFunction<?> restored) {
    FunctionSession session = restored.session();
    session.synchronize();
    List<String> mismatches = new ArrayList<>();
    long bytes = 0;
    int chunks = 0;
    for (ImageManifest.Allocation a : restored.manifest().allocations()) {
      BufferRef ref = new BufferRef(a.name());
      for (ImageManifest.Chunk c : a.chunks()) {
        ByteBuffer b = ByteBuffer.allocateDirect(c.length());
        session.download(ref, c.offset(), b);
        Digest actual = Digest.of(b);
        if (!actual.equals(c.digest())) {
          mismatches.add(a.name() + " @" + c.offset() + ": device holds " + actual + ", image has " + c.digest());
        }
        bytes += c.length();
        chunks++;
      }
    }
    return new Result(bytes, chunks, mismatches);
  }

  /** The response the build recorded for {@code request}, if it ran that request as a sample. */
  public static Optional<JsonNode> buildResponse(ImageManifest manifest, JsonNode request) {
    return manifest.samples().stream().filter(s -> sameJson(s.request(), request))
        .map(ImageManifest.Sample::response).findFirst();
  }

  /**
   * Whether two JSON values are the same document. Compared as text read back by one mapper: the function's
   * float nodes, a file's double nodes and the manifest's decimal nodes differ as objects.
   */
  public static boolean sameJson(JsonNode a, JsonNode b) {
    try {
      return JSON.readTree(JSON.writeValueAsString(a)).equals(JSON.readTree(JSON.writeValueAsString(b)));
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("not JSON: " + e.getOriginalMessage(), e);
    }
  }

  private static final ObjectMapper JSON =
      new ObjectMapper();
}
