package dev.thaw.image.restore;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import dev.thaw.image.ImageManifest;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * Pins a plan's orders: units in first-access order then the rest; each unit's successor on the device; and the run
 * order a host cache lays an image out in (each unit in plan order not placed yet, then what continues it on the
 * device).
 */
class RestorePlanTest {

  private static ImageManifest.Allocation a(String name, long address, long size) {
    return new ImageManifest.Allocation(name, address, size, List.of());
  }

  private static ImageManifest manifest(List<ImageManifest.Allocation> allocations, List<String> firstAccess) {
    JsonNodeFactory f = JsonNodeFactory.instance;
    return new ImageManifest(ImageManifest.SCHEMA_VERSION, new ImageManifest.Function("test.Fn", f.objectNode()),
        new ImageManifest.Device("sim", "9.0", "sm_90", "sim"), allocations, List.of(), f.objectNode(), List.of(),
        new ImageManifest.Build(Instant.now().toString(), "test", 0, 0, 0, 0),
        new ImageManifest.Profile("recorded", 1, firstAccess, Map.of(), null));
  }

  @Test
  void unitsFollowTheProfileAndRunsFollowTheDevice() {
    // w0 w1 w2 back to back (weights), kv apart (a KV cache), x apart; kv is touched between w0 and w1.
    ImageManifest m = manifest(List.of(a("w0", 0x10000, 0x100), a("w1", 0x10100, 0x200), a("w2", 0x10300, 0x80),
        a("kv", 0x90000, 0x40), a("x", 0x80000, 0x10)), List.of("w0", "kv", "w1", "w2"));
    RestorePlan plan = RestorePlan.of(m);
    assertEquals(List.of("w0", "kv", "w1", "w2", "x"), names(plan));
    assertEquals(2, plan.nextOnDevice(0), "w0 runs on into w1");
    assertEquals(3, plan.nextOnDevice(2), "w1 runs on into w2");
    assertEquals(-1, plan.nextOnDevice(1), "nothing starts where kv ends");
    assertEquals(-1, plan.nextOnDevice(3));
    assertEquals(-1, plan.nextOnDevice(4), "x ends at 0x80010, not where kv starts");
    assertEquals(List.of("w0", "w1", "w2", "kv", "x"), plan.runOrder().stream().map(ImageManifest.Allocation::name)
        .toList(), "the weights' run whole, then kv, then x");
  }

  @Test
  void aRunMetInTheMiddleIsNotPlacedTwice() {
    // b is touched first; a, before it on the device, later: a's run reaches b, which is placed already.
    ImageManifest m = manifest(List.of(a("a", 0x1000, 0x100), a("b", 0x1100, 0x100), a("c", 0x1200, 0x100)),
        List.of("b", "a"));
    RestorePlan plan = RestorePlan.of(m);
    assertEquals(List.of("b", "c", "a"), plan.runOrder().stream().map(ImageManifest.Allocation::name).toList());
  }

  private static List<String> names(RestorePlan plan) {
    return java.util.stream.IntStream.range(0, plan.unitCount()).mapToObj(i -> plan.unit(i).name()).toList();
  }
}
