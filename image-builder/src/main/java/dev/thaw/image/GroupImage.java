package dev.thaw.image;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Tags;
import java.util.ArrayList;
import java.util.List;

/**
 * The image of a tensor-parallel group: one ordinary image per rank, each a single device's session (the rank's
 * shard, cache, scratch and exchange buffers at the addresses they were recorded at), tagged {@link #rankTag}
 * {@code name-rank<r>[:version]}, and this group manifest, written into every rank's function config as
 * {@code {"group": {...}, "rank": r}}: the group's tag, the build that made all ranks together (a rank rebuilt on its
 * own has another and is refused), the rank tags in rank order, the devices they were recorded on, and the model's
 * config. Every rank image stays a complete image that the store, {@code thaw images} and {@code thaw verify} read as
 * any other; rank 0's is committed last, so a group whose rank 0 is found was committed whole.
 *
 * <p>All ranks were recorded in one process on their own devices, so their addresses are disjoint and one process
 * maps all of them again, each on a device of its own.
 *
 * @param tag the group's tag ({@code name} or {@code name:version})
 * @param build an id shared by the ranks of one build
 * @param rankTags rank r's image tag at r
 * @param devices the device ordinals rank r was recorded on, at r (the order a restore need not keep: any peers do)
 * @param config the model's config (what was split and how)
 */
public record GroupImage(String tag, String build, List<String> rankTags, List<Integer> devices, JsonNode config) {

  /** The function config field that holds the group manifest, and the one that holds the rank's index. */
  public static final String GROUP_FIELD = "group";
  public static final String RANK_FIELD = "rank";

  public GroupImage {
    Tags.check(tag);
    rankTags = List.copyOf(rankTags);
    devices = List.copyOf(devices);
    if (rankTags.size() < 2 || devices.size() != rankTags.size()) {
      throw new IllegalArgumentException("a group has two or more ranks, each with a device: " + rankTags.size()
          + " ranks, " + devices.size() + " devices");
    }
  }

  /** A group of {@code ranks} ranks recorded on {@code devices}, tagged from {@code tag}. */
  public static GroupImage of(String tag, String build, List<Integer> devices, JsonNode config) {
    List<String> tags = new ArrayList<>();
    for (int r = 0; r < devices.size(); r++) {
      tags.add(rankTag(tag, r));
    }
    return new GroupImage(tag, build, tags, devices, config);
  }

  /**
   * Rank {@code rank}'s image tag: {@code name-rank<r>} for {@code name}, {@code name-rank<r>:version} for
   * {@code name:version}.
   *
   * @throws IllegalArgumentException if the group's tag or the rank's is not a tag
   */
  public static String rankTag(String tag, int rank) {
    Tags.check(tag);
    int colon = tag.indexOf(':');
    String name = colon < 0 ? tag : tag.substring(0, colon);
    String version = colon < 0 ? "" : tag.substring(colon);
    return Tags.check(name + "-rank" + rank + version);
  }

  public int ranks() {
    return rankTags.size();
  }

  /** Rank {@code rank}'s function config: this manifest and its index. */
  public JsonNode rankConfig(int rank) {
    ObjectNode out = JsonNodeFactory.instance.objectNode();
    ObjectNode g = out.putObject(GROUP_FIELD);
    g.put("tag", tag);
    g.put("build", build);
    rankTags.forEach(g.putArray("ranks")::add);
    devices.forEach(g.putArray("devices")::add);
    g.set("config", config);
    out.put(RANK_FIELD, rank);
    return out;
  }

  /** A group image and its ranks' manifests, rank r's at r. */
  public record Stored(GroupImage group, List<ImageManifest> ranks) {

    public Stored {
      ranks = List.copyOf(ranks);
    }
  }

  /**
   * The group tagged {@code tag} and every rank's checked manifest.
   *
   * @throws ImageNotFoundException naming rank 0's tag if there is no image under it (no group of that tag was
   *     committed whole)
   * @throws InvalidManifestException naming the rank: a rank image missing, unreadable, of another build or of another
   *     rank, or a rank 0 image that is not a group's
   */
  public static Stored read(ChunkStore store, String tag) {
    String first = rankTag(tag, 0);
    if (store.manifest(first).isEmpty()) {
      throw new ImageNotFoundException(first);
    }
    ImageManifest m0 = rank(store, tag, first, 0);
    GroupImage group = parse(tag, m0.function().config());
    List<ImageManifest> ranks = new ArrayList<>();
    ranks.add(m0);
    for (int r = 1; r < group.ranks(); r++) {
      String t = group.rankTags().get(r);
      if (store.manifest(t).isEmpty()) {
        throw new InvalidManifestException("group image '" + tag + "' is incomplete: rank " + r + "'s image '" + t
            + "' is not in the store");
      }
      ImageManifest m = rank(store, tag, t, r);
      JsonNode cfg = m.function().config();
      String build = cfg.path(GROUP_FIELD).path("build").asText("");
      if (!build.equals(group.build())) {
        throw new InvalidManifestException("group image '" + tag + "': rank " + r + "'s image '" + t + "' is of "
            + "build '" + build + "', rank 0's of '" + group.build() + "': the ranks were not built together");
      }
      ranks.add(m);
    }
    return new Stored(group, ranks);
  }

  private static ImageManifest rank(ChunkStore store, String tag, String rankTag, int r) {
    ImageManifest m;
    try {
      m = Images.manifest(store, rankTag);
    } catch (InvalidManifestException e) {
      throw new InvalidManifestException("group image '" + tag + "': rank " + r + "'s " + e.getMessage(), e);
    }
    JsonNode cfg = m.function().config();
    if (cfg == null || !cfg.path(RANK_FIELD).isInt() || cfg.path(RANK_FIELD).asInt() != r) {
      throw new InvalidManifestException("group image '" + tag + "': '" + rankTag + "' is not rank " + r
          + " of a group (its function config has " + (cfg == null ? "nothing" : cfg.path(RANK_FIELD)) + ")");
    }
    return m;
  }

  private static GroupImage parse(String tag, JsonNode cfg) {
    JsonNode g = cfg.path(GROUP_FIELD);
    try {
      if (!g.isObject() || !g.path("ranks").isArray() || !g.path("devices").isArray()
          || !g.path("build").isTextual()) {
        throw new IllegalArgumentException("no group manifest in its function config");
      }
      List<String> tags = new ArrayList<>();
      g.path("ranks").forEach(t -> tags.add(t.asText()));
      List<Integer> devices = new ArrayList<>();
      g.path("devices").forEach(d -> devices.add(d.asInt()));
      GroupImage group = new GroupImage(g.path("tag").asText(), g.path("build").asText(), tags, devices,
          g.path("config"));
      if (!group.tag().equals(tag)) {
        throw new IllegalArgumentException("it is the rank 0 of group '" + group.tag() + "'");
      }
      for (int r = 0; r < group.ranks(); r++) {
        if (!tags.get(r).equals(rankTag(tag, r))) {
          throw new IllegalArgumentException("rank " + r + " is tagged '" + tags.get(r) + "', not '"
              + rankTag(tag, r) + "'");
        }
      }
      return group;
    } catch (IllegalArgumentException e) {
      throw new InvalidManifestException("group image '" + tag + "': rank 0's image is not a group's: "
          + e.getMessage(), e);
    }
  }
}
