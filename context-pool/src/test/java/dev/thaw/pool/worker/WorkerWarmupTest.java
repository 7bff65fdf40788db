package dev.thaw.pool.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.thaw.image.ImageManifest;
import java.io.InputStream;
import org.junit.jupiter.api.Test;

class WorkerWarmupTest {

  /**
   * The warm-up swallows a manifest it cannot parse (best effort), so a synthetic manifest the format has
   * outgrown would silently warm nothing: this pins that the large one still reads, at its full size.
   */
  @Test
  void theLargeWarmupManifestIsAValidManifestOfThousandsOfChunks() throws Exception {
    byte[] small;
    try (InputStream in = WorkerWarmup.class.getResourceAsStream("warmup-manifest.json")) {
      small = in.readAllBytes();
    }
    ImageManifest m = ImageManifest.read(WorkerWarmup.largeManifest(small, 440, 12));
    assertEquals(440, m.allocations().size());
    assertEquals(440 * 12, m.allocations().stream().mapToInt(a -> a.chunks().size()).sum());
    assertEquals(440, m.profile().firstAccessOrder().size());
  }
}
