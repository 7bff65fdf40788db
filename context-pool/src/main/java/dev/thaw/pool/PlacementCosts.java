package dev.thaw.pool;

import com.fasterxml.jackson.annotation.JsonAutoDetect;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.restore.OnDemandOptions;

/**
 * What {@link ColdStartPlacement} prices a cold start with: the node's link rates and the fixed cost of each way in.
 * Defaults are the two-H200 node's measured figures (docs/design/memory-tiers.md); a server that measured its own
 * links sets them. Setters check and are fluent; {@link #toJson()} and {@link #fromJson} are the JSON form.
 */
@JsonAutoDetect(fieldVisibility = JsonAutoDetect.Visibility.ANY, getterVisibility = JsonAutoDetect.Visibility.NONE,
    isGetterVisibility = JsonAutoDetect.Visibility.NONE, setterVisibility = JsonAutoDetect.Visibility.NONE)
public final class PlacementCosts {

  /** Pinned host → one GPU over its PCIe gen5 x16 link. */
  public static final double DEFAULT_HOST_LINK_GBPS = 53;
  /** GPU → GPU over NVLink (393 measured by PyTorch; the floor for the peer copy). */
  public static final double DEFAULT_PEER_GBPS = 300;
  /** Store → GPU through a pooled worker (read, verify, stage). */
  public static final double DEFAULT_STORE_GBPS = 4.5;
  /** A helper lends its link at this share: the restore's own default, {@link OnDemandOptions#DEFAULT_HELPER_SHARE}. */
  public static final double DEFAULT_HELPER_SHARE = OnDemandOptions.DEFAULT_HELPER_SHARE;
  /** At most this many helpers per restore: each costs the worker a context and a ring on that device. */
  public static final int DEFAULT_MAX_HELPERS = 3;
  /** Taking, importing and mapping a tier's slabs (this device's or another's). */
  public static final double DEFAULT_TIER_MAP_MILLIS = 1.0;

  private static final class Json {
    static final ObjectMapper MAPPER = new ObjectMapper();
  }

  @JsonProperty private double hostLinkGBps = DEFAULT_HOST_LINK_GBPS;
  @JsonProperty private double peerGBps = DEFAULT_PEER_GBPS;
  @JsonProperty private double storeGBps = DEFAULT_STORE_GBPS;
  @JsonProperty private double helperShare = DEFAULT_HELPER_SHARE;
  @JsonProperty private int maxHelpers = DEFAULT_MAX_HELPERS;
  @JsonProperty private double tierMapMillis = DEFAULT_TIER_MAP_MILLIS;

  public double hostLinkGBps() {
    return hostLinkGBps;
  }

  public PlacementCosts setHostLinkGBps(double gbps) {
    this.hostLinkGBps = rate(gbps, "hostLinkGBps");
    return this;
  }

  public double peerGBps() {
    return peerGBps;
  }

  public PlacementCosts setPeerGBps(double gbps) {
    this.peerGBps = rate(gbps, "peerGBps");
    return this;
  }

  public double storeGBps() {
    return storeGBps;
  }

  public PlacementCosts setStoreGBps(double gbps) {
    this.storeGBps = rate(gbps, "storeGBps");
    return this;
  }

  public double helperShare() {
    return helperShare;
  }

  /** The share of its link a helper lends (over (0, 1]). */
  public PlacementCosts setHelperShare(double share) {
    if (!(share > 0 && share <= 1)) {
      throw new IllegalArgumentException("helperShare is over (0, 1], not " + share);
    }
    this.helperShare = share;
    return this;
  }

  public int maxHelpers() {
    return maxHelpers;
  }

  /** Helpers one restore may use at most; 0 restores through the target's link alone. */
  public PlacementCosts setMaxHelpers(int n) {
    if (n < 0 || n > 15) {
      throw new IllegalArgumentException("maxHelpers is 0 to 15, not " + n);
    }
    this.maxHelpers = n;
    return this;
  }

  public double tierMapMillis() {
    return tierMapMillis;
  }

  public PlacementCosts setTierMapMillis(double millis) {
    if (!(millis >= 0) || Double.isInfinite(millis)) {
      throw new IllegalArgumentException("tierMapMillis must be a finite, non-negative number: " + millis);
    }
    this.tierMapMillis = millis;
    return this;
  }

  private static double rate(double gbps, String what) {
    if (!(gbps > 0) || Double.isInfinite(gbps)) {
      throw new IllegalArgumentException(what + " must be a positive number of GB/s, not " + gbps);
    }
    return gbps;
  }

  public ObjectNode toJson() {
    return Json.MAPPER.valueToTree(this);
  }

  /** Costs from their JSON form; absent fields keep their defaults, and every value is checked. */
  public static PlacementCosts fromJson(JsonNode json) {
    PlacementCosts o;
    try {
      o = Json.MAPPER.treeToValue(json, PlacementCosts.class);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("placement costs: " + e.getOriginalMessage(), e);
    }
    return new PlacementCosts().setHostLinkGBps(o.hostLinkGBps).setPeerGBps(o.peerGBps).setStoreGBps(o.storeGBps)
        .setHelperShare(o.helperShare).setMaxHelpers(o.maxHelpers).setTierMapMillis(o.tierMapMillis);
  }

  @Override
  public String toString() {
    return toJson().toString();
  }
}
