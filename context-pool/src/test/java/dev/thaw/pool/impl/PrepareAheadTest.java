package dev.thaw.pool.impl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.pool.PreparedImage;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Pins the prepare-ahead policy: registrations fill free room and never push out what cold starts used; a cold
 * start brings its image in and the least recently used one out; a new manifest under a name replaces it in place;
 * every change names exactly what workers drop and prepare.
 */
class PrepareAheadTest {

  private static PreparedImage image(String name, String version) {
    return new PreparedImage(name + "@" + version, name, ("{}" + version).getBytes(StandardCharsets.UTF_8), null);
  }

  private static List<String> names(List<PreparedImage> images) {
    return images.stream().map(PreparedImage::name).toList();
  }

  @Test
  void registrationsFillFreeRoomAndNeverPushOut() {
    PrepareAhead ahead = new PrepareAhead(2);
    assertEquals(List.of("a"), names(ahead.register(image("a", "1")).add()));
    assertEquals(List.of("b"), names(ahead.register(image("b", "1")).add()));
    assertTrue(ahead.register(image("c", "1")).isEmpty(), "full: a registration waits for its first cold start");
    assertEquals(List.of("a", "b"), names(ahead.ahead()));
  }

  @Test
  void aColdStartBringsItsImageInAndTheLeastRecentlyUsedOut() {
    PrepareAhead ahead = new PrepareAhead(2);
    ahead.register(image("a", "1"));
    ahead.register(image("b", "1"));
    ahead.register(image("c", "1"));
    assertTrue(ahead.used("a").isEmpty(), "a is prepared already: only its recency changes");
    PrepareAhead.Change c = ahead.used("c");
    assertEquals(List.of("c"), names(c.add()));
    assertEquals(List.of("b@1"), c.drop(), "b was least recently used");
    assertEquals(List.of("a", "c"), names(ahead.ahead()));
    assertTrue(ahead.used("nobody").isEmpty(), "an image never registered changes nothing");
  }

  @Test
  void aNewManifestReplacesItsNameInPlaceAndUnregisteringDropsIt() {
    PrepareAhead ahead = new PrepareAhead(2);
    ahead.register(image("a", "1"));
    PrepareAhead.Change c = ahead.register(image("a", "2"));
    assertEquals(List.of("a@2"), c.add().stream().map(PreparedImage::key).toList());
    assertEquals(List.of("a@1"), c.drop());
    assertTrue(ahead.register(image("a", "2")).isEmpty(), "the same image again changes nothing");
    assertEquals(List.of("a@2"), ahead.forget("a").drop());
    assertTrue(ahead.ahead().isEmpty());
    assertTrue(ahead.used("a").isEmpty(), "forgotten: a cold start of it brings nothing back");
  }

  @Test
  void capacityZeroPreparesNothing() {
    PrepareAhead ahead = new PrepareAhead(0);
    assertTrue(ahead.register(image("a", "1")).isEmpty());
    assertTrue(ahead.used("a").isEmpty());
  }
}
