package dev.thaw.pool;

import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.function.BiPredicate;

/**
 * Where on a node a cold start is cheapest, and by which way in: the same device's HBM tier, another device's tier
 * (a peer copy of the weights over NVLink), the host cache through the device's own link and idle devices' links,
 * the host cache through its own link alone, or the store. A function of what the server knows now (the devices'
 * budgets, which run requests, what each tier holds of the image) and of the node's link rates
 * ({@link PlacementCosts}); it decides, it starts nothing. The chosen way's {@link Source#label()} is what the
 * response's {@code Server-Timing} names ({@code tier;desc="hbm-peer"}).
 *
 * <p>The estimate: the ways in run side by side (the weights from a tier on one stream, the rest from the host on
 * others), so a start costs its fixed part plus the slower of them; host bytes move at the device's link rate plus,
 * for each idle peer device up to {@link PlacementCosts#maxHelpers()}, its share of the slower of that device's link
 * and the peer link: the whole of it when no lent device hosts an instance (the share bounds what a borrowed link
 * costs the functions on its device), else {@link PlacementCosts#helperShare()}; the vacant devices alone when they
 * are faster so. Ties go to the device with more free budget, then the lower ordinal.
 */
public final class ColdStartPlacement {

  /** The way a cold start's bytes come in. */
  public enum Source {
    /** This device's HBM tier holds the weights: mapped as they are; the rest from the host cache. */
    HBM("hbm"),
    /** Another device's tier holds them: pulled over the peer link; the rest from the host cache. */
    HBM_PEER("hbm-peer"),
    /** The host cache, through this device's link and idle peers' links at once. */
    HOST_CACHE_MULTILINK("host-cache-multilink"),
    /** The host cache, through this device's link. */
    HOST_CACHE("host-cache"),
    /** The store: read, verified, staged. */
    STORE("store");

    private final String label;

    Source(String label) {
      this.label = label;
    }

    /** The name {@code Server-Timing} gives it. */
    public String label() {
      return label;
    }
  }

  /**
   * What the server knows of one device now.
   *
   * @param ordinal the device
   * @param fits whether the image fits its budget now (else it cannot be the target)
   * @param freeBytes its free budget, for ties
   * @param busy whether it runs a request now: a busy device lends no link
   * @param tierBytes bytes of this image's weights its HBM tier holds (0 for none)
   * @param vacant whether no instance is there at all, starting or warm: nothing a borrowed link could slow, so it
   *     lends its whole link
   */
  public record DeviceView(int ordinal, boolean fits, long freeBytes, boolean busy, long tierBytes, boolean vacant) {

    /** A device that may host instances: a borrowed link is lent at the configured share. */
    public DeviceView(int ordinal, boolean fits, long freeBytes, boolean busy, long tierBytes) {
      this(ordinal, fits, freeBytes, busy, tierBytes, false);
    }
  }

  /**
   * The cheapest start.
   *
   * @param device the target
   * @param source the way in
   * @param tierDevice the device whose tier the weights come from ({@link Source#HBM}, {@link Source#HBM_PEER}), else
   *     -1
   * @param helpers the idle devices whose links the restore may use, in order (empty unless through the host cache)
   * @param helperShare the part of each helper's link the restore may use: 1 when every helper is vacant, else the
   *     configured {@link PlacementCosts#helperShare()}
   * @param estimatedMillis the estimate that made it the cheapest
   */
  public record Choice(int device, Source source, int tierDevice, List<Integer> helpers, double helperShare,
      double estimatedMillis) {

    public Choice {
      helpers = List.copyOf(helpers);
      if (!(helperShare > 0 && helperShare <= 1)) {
        throw new IllegalArgumentException("a helper's share of its link is over (0, 1], not " + helperShare);
      }
    }

    /** A start that borrows no link. */
    public Choice(int device, Source source, int tierDevice, double estimatedMillis) {
      this(device, source, tierDevice, List.of(), 1, estimatedMillis);
    }

    /** {@code tier;desc="<label>"}: the entry a response's {@code Server-Timing} carries. */
    public String serverTiming() {
      return "tier;desc=\"" + source.label() + "\"";
    }
  }

  private final PlacementCosts costs;
  private final BiPredicate<Integer, Integer> peers;

  /**
   * @param peers whether the first device's copy engines reach the second's memory (the driver's
   *     {@code canAccessPeer}; on an NVLink node, every pair)
   */
  public ColdStartPlacement(PlacementCosts costs, BiPredicate<Integer, Integer> peers) {
    this.costs = costs;
    this.peers = peers;
  }

  /** The rates and fixed costs it prices with. */
  public PlacementCosts costs() {
    return costs;
  }

  /**
   * The cheapest start of an image of {@code imageBytes} device bytes, or empty when it fits no device.
   *
   * @param hostCached whether all of its chunks are in the host cache (else the rest comes from the store)
   */
  public Optional<Choice> place(long imageBytes, boolean hostCached, List<DeviceView> devices) {
    if (imageBytes < 0) {
      throw new IllegalArgumentException("image bytes must not be negative: " + imageBytes);
    }
    Choice best = null;
    long bestFree = 0;
    for (DeviceView d : devices) {
      if (!d.fits()) {
        continue;
      }
      List<Integer> helpers = hostCached ? helpers(d.ordinal(), devices) : List.of();
      double share = share(helpers, devices);
      double rest = hostCached ? hostRate(helpers.size(), share) : costs.storeGBps();
      Source viaHost = !hostCached ? Source.STORE : helpers.isEmpty() ? Source.HOST_CACHE : Source.HOST_CACHE_MULTILINK;
      List<Choice> ways = new ArrayList<>();
      ways.add(viaHost == Source.STORE ? new Choice(d.ordinal(), viaHost, -1, millis(imageBytes, rest))
          : new Choice(d.ordinal(), viaHost, -1, helpers, share, millis(imageBytes, rest)));
      for (DeviceView t : devices) {
        if (t.tierBytes() <= 0) {
          continue;
        }
        long others = Math.max(0, imageBytes - t.tierBytes());
        if (t.ordinal() == d.ordinal()) {
          ways.add(new Choice(d.ordinal(), Source.HBM, t.ordinal(), others > 0 ? helpers : List.of(), share,
              costs.tierMapMillis() + millis(others, rest)));
        } else if (peers.test(d.ordinal(), t.ordinal())) {
          // The tier device's link does not carry the rest: it serves the pull.
          List<Integer> without = others > 0 ? helpers.stream().filter(h -> h != t.ordinal()).toList() : List.of();
          double shareWithout = share(without, devices);
          double restWithout = hostCached ? hostRate(without.size(), shareWithout) : costs.storeGBps();
          ways.add(new Choice(d.ordinal(), Source.HBM_PEER, t.ordinal(), without, shareWithout, costs.tierMapMillis()
              + Math.max(millis(t.tierBytes(), costs.peerGBps()), millis(others, restWithout))));
        }
      }
      for (Choice c : ways) {
        if (best == null || c.estimatedMillis() < best.estimatedMillis()
            || c.estimatedMillis() == best.estimatedMillis() && d.freeBytes() > bestFree) {
          best = c;
          bestFree = d.freeBytes();
        }
      }
    }
    return Optional.ofNullable(best);
  }

  /**
   * The idle devices that lend {@code target} their link, in ordinal order, at most {@code maxHelpers}: all of them
   * (at the configured share when one hosts an instance), or only the vacant ones (whole links) when that is faster.
   */
  private List<Integer> helpers(int target, List<DeviceView> devices) {
    List<Integer> idle = new ArrayList<>();
    List<Integer> vacant = new ArrayList<>();
    for (DeviceView h : devices) {
      if (h.ordinal() != target && !h.busy() && peers.test(target, h.ordinal())) {
        if (idle.size() < costs.maxHelpers()) {
          idle.add(h.ordinal());
        }
        if (h.vacant() && vacant.size() < costs.maxHelpers()) {
          vacant.add(h.ordinal());
        }
      }
    }
    return hostRate(vacant.size(), 1) > hostRate(idle.size(), share(idle, devices)) ? vacant : idle;
  }

  /**
   * The share {@code helpers} are lent at: whole when none hosts an instance (the share bounds what a borrowed link
   * costs the functions on its device, and there are none), else the configured share.
   */
  private double share(List<Integer> helpers, List<DeviceView> devices) {
    for (DeviceView h : devices) {
      if (helpers.contains(h.ordinal()) && !h.vacant()) {
        return costs.helperShare();
      }
    }
    return 1;
  }

  /** GB/s from the host through the target's link and {@code helpers} links lent at {@code share}. */
  private double hostRate(int helpers, double share) {
    return costs.hostLinkGBps() + helpers * share * Math.min(costs.hostLinkGBps(), costs.peerGBps());
  }

  private static double millis(long bytes, double gbps) {
    return bytes / (gbps * 1e6);
  }
}
