package dev.thaw.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.pool.ColdStartPlacement.Choice;
import dev.thaw.pool.ColdStartPlacement.DeviceView;
import dev.thaw.pool.ColdStartPlacement.Source;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Pins where a cold start goes on a node and by which way: the same device's tier first, another device's tier over
 * the peer link when the image does not fit where its weights are, the host cache through every idle peer's link, one
 * link when the others are busy or not peers (lent whole when they host no instance, else at the configured share), the
 * store when the host cache lacks the image; nothing when it fits no device. Priced with the two-H200 defaults.
 */
class ColdStartPlacementTest {

  private static final long GB = 1_000_000_000L;
  /** GPT-2-large: 1.55 GB, of which 1.5477 GB read-only weights. */
  private static final long GPT2_LARGE = 1_562_400_000L;
  private static final long GPT2_WEIGHTS = 1_547_700_000L;

  private final ColdStartPlacement node = new ColdStartPlacement(new PlacementCosts(), (a, b) -> true);

  private static DeviceView idle(int ordinal, long free) {
    return new DeviceView(ordinal, true, free, false, 0);
  }

  @Test
  void weightsOnADeviceThatFitsStartThereFromItsTier() {
    Choice c = node.place(GPT2_LARGE, true, List.of(idle(0, 100 * GB),
        new DeviceView(1, true, 50 * GB, false, GPT2_WEIGHTS))).orElseThrow();
    assertEquals(1, c.device());
    assertEquals(Source.HBM, c.source());
    assertEquals(1, c.tierDevice());
    assertEquals("tier;desc=\"hbm\"", c.serverTiming());
    assertTrue(c.estimatedMillis() < 2, c.toString());
  }

  @Test
  void weightsOnADeviceThatDoesNotFitArePulledOverThePeerLink() {
    Choice c = node.place(GPT2_LARGE, true, List.of(idle(0, 100 * GB),
        new DeviceView(1, false, 0, true, GPT2_WEIGHTS))).orElseThrow();
    assertEquals(0, c.device());
    assertEquals(Source.HBM_PEER, c.source());
    assertEquals(1, c.tierDevice());
    assertEquals(List.of(), c.helpers(), "the busy tier device lends no link");
    // 1.5477 GB at 300 GB/s (5.2 ms) beside 14.7 MB through one link (0.3 ms), plus the mapping.
    assertEquals(1.0 + GPT2_WEIGHTS / 300e6, c.estimatedMillis(), 1e-9);
    assertEquals("tier;desc=\"hbm-peer\"", c.serverTiming());
  }

  @Test
  void withNothingOnAnyTierTheHostCacheGoesThroughEveryIdlePeersLink() {
    Choice c = node.place(16 * GB, true, List.of(idle(0, 100 * GB), idle(1, 120 * GB))).orElseThrow();
    assertEquals(1, c.device(), "equal estimates: the device with more free budget");
    assertEquals(Source.HOST_CACHE_MULTILINK, c.source());
    assertEquals(List.of(0), c.helpers());
    // The idle peer's link lent at the default share (half of it) beside the target's own.
    assertEquals(16 * GB / ((1 + PlacementCosts.DEFAULT_HELPER_SHARE) * 53e6), c.estimatedMillis(), 1e-9);
    assertEquals("tier;desc=\"host-cache-multilink\"", c.serverTiming());
  }

  @Test
  void vacantHelpersLendTheirWholeLinkAndOneHostingAnInstanceHalvesEvery() {
    DeviceView vacant0 = new DeviceView(0, true, 100 * GB, false, 0, true);
    DeviceView vacant2 = new DeviceView(2, true, 100 * GB, false, 0, true);
    DeviceView target = new DeviceView(1, true, 120 * GB, false, 0, true);
    Choice whole = node.place(16 * GB, true, List.of(vacant0, target, vacant2)).orElseThrow();
    assertEquals(1, whole.device());
    assertEquals(List.of(0, 2), whole.helpers());
    assertEquals(1.0, whole.helperShare(), "no instance on a helper: nothing for the share to protect");
    assertEquals(16 * GB / (3 * 53e6), whole.estimatedMillis(), 1e-9);
    // Device 2 holds an instance (idle now, so still a helper; full, so no target): the restore is paced on every
    // helper it borrows.
    DeviceView hosting2 = new DeviceView(2, false, 0, false, 0, false);
    Choice paced = node.place(16 * GB, true, List.of(vacant0, target, hosting2)).orElseThrow();
    assertEquals(1, paced.device());
    assertEquals(List.of(0, 2), paced.helpers());
    assertEquals(PlacementCosts.DEFAULT_HELPER_SHARE, paced.helperShare());
    assertEquals(16 * GB / ((1 + 2 * PlacementCosts.DEFAULT_HELPER_SHARE) * 53e6), paced.estimatedMillis(), 1e-9);
    // Four devices, one hosting: two vacant links whole (3 x 53 GB/s) beat three at half (2.5 x 53).
    DeviceView vacant3 = new DeviceView(3, false, 0, false, 0, true);
    Choice vacantOnly = node.place(16 * GB, true, List.of(vacant0, target, hosting2, vacant3)).orElseThrow();
    assertEquals(List.of(0, 3), vacantOnly.helpers());
    assertEquals(1.0, vacantOnly.helperShare());
    assertThrows(IllegalArgumentException.class, () -> new Choice(0, Source.HOST_CACHE, -1, List.of(1), 0, 1.0));
  }

  @Test
  void aBusyOrUnreachableDeviceLendsNoLink() {
    List<DeviceView> busy = List.of(new DeviceView(0, false, 0, true, 0), idle(1, 10 * GB));
    Choice c = node.place(16 * GB, true, busy).orElseThrow();
    assertEquals(1, c.device());
    assertEquals(Source.HOST_CACHE, c.source());
    assertEquals(List.of(), c.helpers());
    ColdStartPlacement apart = new ColdStartPlacement(new PlacementCosts(), (a, b) -> false);
    Choice alone = apart.place(16 * GB, true, List.of(idle(0, GB * 100), idle(1, GB * 100))).orElseThrow();
    assertEquals(Source.HOST_CACHE, alone.source());
    Choice noPeer = apart.place(GPT2_LARGE, true, List.of(idle(0, 100 * GB),
        new DeviceView(1, false, 0, false, GPT2_WEIGHTS))).orElseThrow();
    assertEquals(Source.HOST_CACHE, noPeer.source(), "another device's tier is no use without a peer link");
  }

  @Test
  void helpersAreCappedAndAPeerTierIsNotPreferredWhenItCostsMore() {
    PlacementCosts slowPeer = new PlacementCosts().setPeerGBps(20).setMaxHelpers(2);
    ColdStartPlacement p = new ColdStartPlacement(slowPeer, (a, b) -> true);
    List<DeviceView> four = List.of(idle(0, 100 * GB), idle(1, 90 * GB), idle(2, 80 * GB),
        new DeviceView(3, false, 0, false, GPT2_WEIGHTS));
    Choice c = p.place(GPT2_LARGE, true, four).orElseThrow();
    // 20 GB/s over NVLink is slower than the host cache through three links (53 + 2 × half of 20): the host cache
    // wins.
    assertEquals(Source.HOST_CACHE_MULTILINK, c.source());
    assertEquals(2, c.helpers().size());
  }

  @Test
  void withoutTheHostCacheItIsTheStoreAndNothingFitsNowhere() {
    Choice c = node.place(GPT2_LARGE, false, List.of(idle(0, 100 * GB), idle(1, 100 * GB))).orElseThrow();
    assertEquals(Source.STORE, c.source());
    assertEquals(List.of(), c.helpers());
    assertTrue(node.place(GPT2_LARGE, true, List.of(new DeviceView(0, false, 0, false, 0))).isEmpty());
    assertThrows(IllegalArgumentException.class, () -> node.place(-1, true, List.of()));
  }

  @Test
  void costsHaveAJsonFormThatIsChecked() {
    PlacementCosts c = new PlacementCosts().setPeerGBps(390).setMaxHelpers(1);
    PlacementCosts back = PlacementCosts.fromJson(c.toJson());
    assertEquals(390, back.peerGBps());
    assertEquals(1, back.maxHelpers());
    assertThrows(IllegalArgumentException.class, () -> PlacementCosts.fromJson(c.toJson().put("helperShare", 0)));
    assertThrows(IllegalArgumentException.class, () -> new PlacementCosts().setHostLinkGBps(0));
  }
}
