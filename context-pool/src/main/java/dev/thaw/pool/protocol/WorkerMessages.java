package dev.thaw.pool.protocol;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.pool.ImageSource;
import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.hbm.ExportedSlab;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Every frame head of the worker protocol as a type: what the parent sends ({@link Request}) and what a worker
 * answers or reports ({@link Reply}). Both sides build and read heads only through these records, so a key is
 * spelled once, here. On the wire a head is a JSON object whose keys are the record's component names (a nested
 * record is a nested object); an absent optional component is an absent key. {@code docs/design/context-pool.md}'s
 * protocol table lists the same keys ({@code WorkerMessagesTest} holds the two together).
 *
 * <p>Decoding is lenient about what it does not know (an extra key is ignored, a missing one takes its default):
 * both sides of one conversation run one build, and {@link FrameCodec#VERSION} refuses any other.
 */
public final class WorkerMessages {

  private WorkerMessages() {}

  /** A head of some frame type. */
  public sealed interface Head {
    FrameType type();

    /** The head as it travels; an empty head for a message that says nothing but its type. */
    default ObjectNode toJson() {
      return FrameCodec.head();
    }
  }

  /** What the parent sends a worker. */
  public sealed interface Request extends Head
      permits Become, BecomeGroup, Invoke, Cancel, Status, Exit, Export, Prepare, Forget, Trace, Recycle {}

  /** What a worker sends its parent: an answer (RESULT) or a report of its own. */
  public sealed interface Reply extends Head
      permits Ready, Near, Part, Resident, BecomeAnswer, InvokeAnswer, PrepareAnswer, ForgetAnswer, ExportAnswer,
      TraceAnswer, StatusAnswer, ExitAnswer, RecycleAnswer, Failure {}

  // ---- parent → worker ----

  /**
   * Become an image. The body is its manifest ({@code manifestBytes} of it; none when {@code prepared} names a
   * PREPARE's key), then for a host-cache source the chunk placement, unless {@code placementPrepared} says the
   * PREPARE's placement still holds.
   *
   * @param prepared the key of an image this worker prepared, or null to send it whole
   */
  public record Become(String name, Source source, int manifestBytes, boolean awaitResident, String prepared,
      boolean placementPrepared) implements Request {
    @Override
    public FrameType type() {
      return FrameType.BECOME;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      h.put("name", name);
      h.set("source", source.toJson());
      h.put("manifestBytes", manifestBytes);
      h.put("awaitResident", awaitResident);
      if (prepared != null) {
        h.put("prepared", prepared);
      }
      if (placementPrepared) {
        h.put("placementPrepared", true);
      }
      return h;
    }

    public static Become from(JsonNode h) {
      String prepared = h.path("prepared").asText("");
      return new Become(h.path("name").asText("image"), Source.from(h.path("source")),
          h.path("manifestBytes").asInt(-1), h.path("awaitResident").asBoolean(false),
          prepared.isEmpty() ? null : prepared, h.path("placementPrepared").asBoolean(false));
    }
  }

  /**
   * BECOME_GROUP: restore the ranks of a group image at once, rank r's image onto device {@code ranks.get(r).device()}
   * (rank 0's onto this worker's own), each from its own source through its own device's link, and serve the group.
   * The body is each rank's manifest then its host-cache placement, in rank order, as long as the head says; with
   * {@code prepared}, the key of the group this worker prepared (PREPARE with ranks) for exactly these devices, and
   * the ranks' placements alone (their manifests are the prepared ones).
   */
  public record BecomeGroup(String name, List<GroupRank> ranks, boolean awaitResident, String prepared)
      implements Request {
    public BecomeGroup {
      ranks = List.copyOf(ranks);
    }

    @Override
    public FrameType type() {
      return FrameType.BECOME_GROUP;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      h.put("name", name);
      ArrayNode a = h.putArray("ranks");
      for (GroupRank r : ranks) {
        a.add(r.toJson());
      }
      h.put("awaitResident", awaitResident);
      if (prepared != null) {
        h.put("prepared", prepared);
      }
      return h;
    }

    public static BecomeGroup from(JsonNode h) {
      List<GroupRank> ranks = new ArrayList<>();
      for (JsonNode r : h.path("ranks")) {
        ranks.add(GroupRank.from(r));
      }
      String prepared = h.path("prepared").asText("");
      return new BecomeGroup(h.path("name").asText("group"), ranks, h.path("awaitResident").asBoolean(false),
          prepared.isEmpty() ? null : prepared);
    }
  }

  /**
   * One rank of a BECOME_GROUP or of a group's PREPARE: its image's tag, the device it goes to (-1 in a PREPARE: the
   * worker's own plus the rank, modulo the node's devices), where its bytes come from (null in a PREPARE), and how many
   * bytes of the body are its manifest and its placement.
   */
  public record GroupRank(String tag, int device, Source source, int manifestBytes, int placementBytes) {

    ObjectNode toJson() {
      ObjectNode n = FrameCodec.head();
      n.put("tag", tag);
      n.put("device", device);
      if (source != null) {
        n.set("source", source.toJson());
      }
      n.put("manifestBytes", manifestBytes);
      n.put("placementBytes", placementBytes);
      return n;
    }

    static GroupRank from(JsonNode n) {
      return new GroupRank(n.path("tag").asText(""), n.path("device").asInt(-1),
          n.path("source").isObject() ? Source.from(n.get("source")) : null,
          n.path("manifestBytes").asInt(-1), n.path("placementBytes").asInt(-1));
    }
  }

  /**
   * Where a BECOME reads the image's bytes: {@code kind} {@code store} or {@code cache} (the host cache, with the
   * store at {@code path} for what it lacks).
   *
   * @param hbm the HBM tier's slabs of the image, or null
   * @param helpers other devices whose links the restore may use for the host cache's bytes (the worker lends it
   *     those it holds a usable link to), in order; empty for none
   * @param helperShare the part of each helper's link the restore may use, over (0, 1]
   * @param peer another device's HBM-tier slabs of the image, whose bytes the restore pulls over the peer link into
   *     fresh slabs of its own, or null
   */
  public record Source(String kind, String path, Hbm hbm, List<Integer> helpers, double helperShare, Hbm peer) {
    public Source {
      helpers = List.copyOf(helpers);
    }

    /** Through this device's link alone, nothing from another device's tier. */
    public Source(String kind, String path, Hbm hbm) {
      this(kind, path, hbm, List.of(), OnDemandOptions.DEFAULT_HELPER_SHARE, null);
    }

    /** What a BECOME's head says of {@code source} (its placement travels in the body). */
    public static Source of(ImageSource source) {
      long pid = ProcessHandle.current().pid();
      return new Source(source.kind(), source.path().toString(), source.resident() == null ? null
          : new Hbm(pid, ExportedSlab.encodeAll(source.resident())), source.helpers(), source.helperShare(),
          source.peer() == null ? null : new Hbm(pid, ExportedSlab.encodeAll(source.peer()), source.peerDevice()));
    }

    public ObjectNode toJson() {
      ObjectNode n = FrameCodec.head();
      n.put("kind", kind);
      if (path != null) {
        n.put("path", path);
      }
      if (hbm != null) {
        n.set("hbm", hbm.toJson());
      }
      if (!helpers.isEmpty()) {
        putInts(n.putArray("helpers"), helpers);
        n.put("helperShare", helperShare);
      }
      if (peer != null) {
        n.set("peer", peer.toJson());
      }
      return n;
    }

    public static Source from(JsonNode n) {
      return new Source(n.path("kind").asText("store"), n.hasNonNull("path") ? n.get("path").asText() : null,
          n.path("hbm").isObject() ? Hbm.from(n.get("hbm")) : null, readInts(n.path("helpers")),
          n.path("helperShare").asDouble(OnDemandOptions.DEFAULT_HELPER_SHARE),
          n.path("peer").isObject() ? Hbm.from(n.get("peer")) : null);
    }
  }

  /**
   * HBM-tier slabs a BECOME maps instead of copying (or, as a {@link Source#peer}, pulls from): descriptors of process
   * {@code pid} ({@code pidfd_getfd}), {@code slabs} in {@code ExportedSlab.encodeAll}'s form (may be empty: then the
   * slabs are created exportable).
   *
   * @param device the device whose memory the slabs are, for a {@link Source#peer} (the worker relays them through
   *     its link from that device when it holds one); -1 for the worker's own device, or not said
   */
  public record Hbm(long pid, String slabs, int device) {

    /** Slabs of the worker's own device (its HBM tier). */
    public Hbm(long pid, String slabs) {
      this(pid, slabs, -1);
    }

    ObjectNode toJson() {
      ObjectNode n = FrameCodec.head();
      n.put("pid", pid);
      n.put("slabs", slabs);
      if (device >= 0) {
        n.put("device", device);
      }
      return n;
    }

    static Hbm from(JsonNode n) {
      return new Hbm(n.path("pid").asLong(), n.path("slabs").asText(""), n.path("device").asInt(-1));
    }
  }

  /**
   * One request: the body is {@code jsonBytes} of request JSON, then raw bytes.
   *
   * @param nearMicros send NEAR this long after beginning it; 0 for none
   * @param stream send the parts of the response as PART frames while it runs
   */
  public record Invoke(int jsonBytes, long nearMicros, boolean stream) implements Request {
    @Override
    public FrameType type() {
      return FrameType.INVOKE;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      h.put("jsonBytes", jsonBytes);
      if (nearMicros > 0) {
        h.put("nearMicros", nearMicros);
      }
      if (stream) {
        h.put("stream", true);
      }
      return h;
    }

    public static Invoke from(JsonNode h, int bodyLength) {
      return new Invoke(h.path("jsonBytes").asInt(bodyLength), h.path("nearMicros").asLong(0),
          h.path("stream").asBoolean(false));
    }
  }

  /** The caller of the INVOKE with this frame's id went away: end it (it is answered as usual). */
  public record Cancel() implements Request {
    @Override
    public FrameType type() {
      return FrameType.CANCEL;
    }
  }

  /** What are you doing; answered even while a BECOME or INVOKE runs. */
  public record Status() implements Request {
    @Override
    public FrameType type() {
      return FrameType.STATUS;
    }
  }

  /** Answer, then exit 0. */
  public record Exit() implements Request {
    @Override
    public FrameType type() {
      return FrameType.EXIT;
    }
  }

  /** Export the resident image's read-only slabs for the HBM tier. */
  public record Export() implements Request {
    @Override
    public FrameType type() {
      return FrameType.EXPORT;
    }
  }

  /**
   * Prepare an image while blank: the body is its manifest ({@code manifestBytes}), then its chunk placement in the
   * host cache, if any. The worker holds at most {@code keep} prepared images and drops the least recently
   * prepared beyond that, saying which in its answer.
   */
  public record Prepare(String key, String name, int manifestBytes, int keep, List<GroupRank> ranks)
      implements Request {
    public Prepare {
      ranks = List.copyOf(ranks);
    }

    /** An image: its manifest, then its placement. */
    public Prepare(String key, String name, int manifestBytes, int keep) {
      this(key, name, manifestBytes, keep, List.of());
    }

    @Override
    public FrameType type() {
      return FrameType.PREPARE;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      h.put("key", key);
      h.put("name", name);
      h.put("manifestBytes", manifestBytes);
      h.put("keep", keep);
      if (!ranks.isEmpty()) {
        ArrayNode a = h.putArray("ranks");
        ranks.forEach(r -> a.add(r.toJson()));
      }
      return h;
    }

    public static Prepare from(JsonNode h, int bodyLength) {
      List<GroupRank> ranks = new ArrayList<>();
      for (JsonNode r : h.path("ranks")) {
        ranks.add(GroupRank.from(r));
      }
      return new Prepare(h.path("key").asText(""), h.path("name").asText("image"),
          h.path("manifestBytes").asInt(bodyLength), h.path("keep").asInt(1), ranks);
    }
  }

  /** Drop these prepared images (keys the worker does not hold are ignored). */
  public record Forget(List<String> keys) implements Request {
    public Forget {
      keys = List.copyOf(keys);
    }

    @Override
    public FrameType type() {
      return FrameType.FORGET;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      putStrings(h.putArray("keys"), keys);
      return h;
    }

    public static Forget from(JsonNode h) {
      return new Forget(readStrings(h.path("keys")));
    }
  }

  /** The resident restore's timeline as Chrome trace, copy spans capped at {@code maxSpans}. */
  public record Trace(int maxSpans) implements Request {
    @Override
    public FrameType type() {
      return FrameType.TRACE;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      h.put("maxSpans", maxSpans);
      return h;
    }

    public static Trace from(JsonNode h, int defaultSpans) {
      return new Trace(Math.max(1, h.path("maxSpans").asInt(defaultSpans)));
    }
  }

  /**
   * Drop the image and become blank again.
   *
   * @param exportKept the HBM tier took the slabs of this worker's EXPORT: their memory is the tier's now, and the
   *     worker neither scrubs nor writes it (without this, exported slabs are scrubbed like the rest)
   */
  public record Recycle(boolean exportKept) implements Request {
    @Override
    public FrameType type() {
      return FrameType.RECYCLE;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      h.put("exportKept", exportKept);
      return h;
    }

    public static Recycle from(JsonNode h) {
      return new Recycle(h.path("exportKept").asBoolean(false));
    }
  }

  // ---- worker → parent ----

  /**
   * Started (and, with {@code warm}, warmed up); a worker that warms up after READY sends a second one, warm.
   *
   * @param prepared keys of the images it prepared at start
   * @param helpers the other devices it holds a link to, which a BECOME may name ({@link Source#helpers()})
   */
  public record Ready(long pid, int protocol, Device device, Map<String, Double> phases, boolean warm,
      List<String> prepared, List<Integer> helpers) implements Reply {
    public Ready {
      phases = Collections.unmodifiableMap(new LinkedHashMap<>(phases));
      prepared = List.copyOf(prepared);
      helpers = List.copyOf(helpers);
    }

    @Override
    public FrameType type() {
      return FrameType.READY;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      h.put("pid", pid);
      h.put("protocol", protocol);
      h.set("device", device.toJson());
      putPhases(h.putObject("phases"), phases);
      h.put("warm", warm);
      putStrings(h.putArray("prepared"), prepared);
      putInts(h.putArray("helpers"), helpers);
      return h;
    }

    public static Ready from(JsonNode h) {
      return new Ready(h.path("pid").asLong(), h.path("protocol").asInt(), Device.from(h.path("device")),
          readPhases(h.path("phases")), h.path("warm").asBoolean(true), readStrings(h.path("prepared")),
          readInts(h.path("helpers")));
    }
  }

  /** The device a worker opened. */
  public record Device(String driver, boolean simulated, String name, int ordinal) {
    ObjectNode toJson() {
      ObjectNode n = FrameCodec.head();
      n.put("driver", driver);
      n.put("simulated", simulated);
      n.put("name", name);
      n.put("ordinal", ordinal);
      return n;
    }

    static Device from(JsonNode n) {
      return new Device(n.path("driver").asText(), n.path("simulated").asBoolean(), n.path("name").asText(),
          n.path("ordinal").asInt());
    }
  }

  /** The INVOKE with this frame's id is due to answer within the wake-ahead. */
  public record Near() implements Reply {
    @Override
    public FrameType type() {
      return FrameType.NEAR;
    }
  }

  /** One part of the response of the INVOKE with this frame's id: the body is its JSON. */
  public record Part() implements Reply {
    @Override
    public FrameType type() {
      return FrameType.PART;
    }
  }

  /**
   * Every byte of the BECOME's image (this frame's id) is on the device: how long that took, from where.
   *
   * @param peerBytes bytes pulled from another device's HBM tier
   * @param helperBytes of {@code hostBytes}, those that came through other devices' links
   */
  public record Resident(double sinceBecomeMillis, long bytes, long hostBytes, long storeBytes, long residentBytes,
      int copies, int promotions, long waits, long peerBytes, long helperBytes) implements Reply {
    @Override
    public FrameType type() {
      return FrameType.RESIDENT;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      h.put("sinceBecomeMillis", sinceBecomeMillis);
      h.put("bytes", bytes);
      h.put("hostBytes", hostBytes);
      h.put("storeBytes", storeBytes);
      h.put("residentBytes", residentBytes);
      h.put("copies", copies);
      h.put("promotions", promotions);
      h.put("waits", waits);
      h.put("peerBytes", peerBytes);
      h.put("helperBytes", helperBytes);
      return h;
    }

    public static Resident from(JsonNode h) {
      return new Resident(h.path("sinceBecomeMillis").asDouble(), h.path("bytes").asLong(),
          h.path("hostBytes").asLong(), h.path("storeBytes").asLong(), h.path("residentBytes").asLong(),
          h.path("copies").asInt(), h.path("promotions").asInt(), h.path("waits").asLong(),
          h.path("peerBytes").asLong(), h.path("helperBytes").asLong());
    }
  }

  /**
   * The function is invocable. {@code phases} are disjoint and end with {@code total}; {@code totalEndNanos} and
   * {@code sentNanos} (the worker's {@link System#nanoTime()} when its total ended and when this was written) let
   * the parent tell the answer's own time on the way.
   *
   * @param source {@code hbm}, {@code hbm-peer}, {@code cache} or {@code store}
   * @param helpers the devices whose links the restore was lent (of those the BECOME named), in order, then the
   *     device relaying its HBM tier's slabs through its link ({@code hbm-peer}), if one did
   * @param hbmImportMillis the HBM-tier slabs' import, part of mapping; negative when none were imported
   */
  public record BecomeAnswer(Map<String, Double> phases, long bytes, String source, List<Integer> helpers,
      boolean resident, double hbmImportMillis, long totalEndNanos, long sentNanos) implements Reply {
    public BecomeAnswer {
      helpers = List.copyOf(helpers);
    }

    @Override
    public FrameType type() {
      return FrameType.RESULT;
    }

    /** The same answer, stamped as it is written. */
    public BecomeAnswer sentAt(long nanos) {
      return new BecomeAnswer(phases, bytes, source, helpers, resident, hbmImportMillis, totalEndNanos, nanos);
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      putPhases(h.putObject("phases"), phases);
      h.put("bytes", bytes);
      h.put("source", source);
      if (!helpers.isEmpty()) {
        putInts(h.putArray("helpers"), helpers);
      }
      h.put("resident", resident);
      if (hbmImportMillis >= 0) {
        h.put("hbmImportMillis", hbmImportMillis);
      }
      h.put("totalEndNanos", totalEndNanos);
      h.put("sentNanos", sentNanos);
      return h;
    }

    public static BecomeAnswer from(JsonNode h) {
      return new BecomeAnswer(readPhases(h.path("phases")), h.path("bytes").asLong(), h.path("source").asText("store"),
          readInts(h.path("helpers")), h.path("resident").asBoolean(), h.path("hbmImportMillis").asDouble(-1),
          h.path("totalEndNanos").asLong(0), h.path("sentNanos").asLong(0));
    }
  }

  /** The response: the body is {@code jsonBytes} of response JSON, then raw bytes. */
  public record InvokeAnswer(int jsonBytes, Map<String, Double> phases) implements Reply {
    @Override
    public FrameType type() {
      return FrameType.RESULT;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      h.put("jsonBytes", jsonBytes);
      putPhases(h.putObject("phases"), phases);
      return h;
    }

    public static InvokeAnswer from(JsonNode h, int bodyLength) {
      int n = h.path("jsonBytes").asInt(bodyLength);
      return new InvokeAnswer(Math.min(Math.max(n, 0), bodyLength), readPhases(h.path("phases")));
    }
  }

  /** Prepared; {@code dropped} are the keys it let go to keep at most the PREPARE's {@code keep}. */
  public record PrepareAnswer(Map<String, Double> phases, List<String> dropped) implements Reply {
    public PrepareAnswer {
      dropped = List.copyOf(dropped);
    }

    @Override
    public FrameType type() {
      return FrameType.RESULT;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      putPhases(h.putObject("phases"), phases);
      putStrings(h.putArray("dropped"), dropped);
      return h;
    }

    public static PrepareAnswer from(JsonNode h) {
      return new PrepareAnswer(readPhases(h.path("phases")), readStrings(h.path("dropped")));
    }
  }

  /** The FORGET's keys the worker held and has dropped. */
  public record ForgetAnswer(List<String> dropped) implements Reply {
    public ForgetAnswer {
      dropped = List.copyOf(dropped);
    }

    @Override
    public FrameType type() {
      return FrameType.RESULT;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      putStrings(h.putArray("dropped"), dropped);
      return h;
    }

    public static ForgetAnswer from(JsonNode h) {
      return new ForgetAnswer(readStrings(h.path("dropped")));
    }
  }

  /**
   * Blank again.
   *
   * @param phases where the drop went: {@code stop} (copies and the function's work), {@code scrub}, {@code free}
   *     (unmap, release, unload), {@code check} (nothing of the image's left on the device), {@code gc} (its host
   *     state collected), {@code helperLinks} (the links its first restore closed, opened again)
   * @param scrubbedBytes device bytes zeroed before they were released
   * @param keptBytes device bytes released unscrubbed because the HBM tier holds them (imported from it, or exported
   *     to it and kept)
   * @param prepared keys of the images it holds prepared now
   * @param helpers the other devices it holds a link to now
   * @param images the images this worker has become in its life
   */
  public record RecycleAnswer(Map<String, Double> phases, long scrubbedBytes, long keptBytes, List<String> prepared,
      List<Integer> helpers, int images) implements Reply {
    public RecycleAnswer {
      phases = Collections.unmodifiableMap(new LinkedHashMap<>(phases));
      prepared = List.copyOf(prepared);
      helpers = List.copyOf(helpers);
    }

    @Override
    public FrameType type() {
      return FrameType.RESULT;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      putPhases(h.putObject("phases"), phases);
      h.put("scrubbedBytes", scrubbedBytes);
      h.put("keptBytes", keptBytes);
      putStrings(h.putArray("prepared"), prepared);
      putInts(h.putArray("helpers"), helpers);
      h.put("images", images);
      return h;
    }

    public static RecycleAnswer from(JsonNode h) {
      return new RecycleAnswer(readPhases(h.path("phases")), h.path("scrubbedBytes").asLong(),
          h.path("keptBytes").asLong(), readStrings(h.path("prepared")), readInts(h.path("helpers")),
          h.path("images").asInt());
    }
  }

  /** The read-only slabs' descriptors in process {@code pid}, in {@code ExportedSlab.encodeAll}'s form. */
  public record ExportAnswer(long pid, String slabs) implements Reply {
    @Override
    public FrameType type() {
      return FrameType.RESULT;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      h.put("pid", pid);
      h.put("slabs", slabs);
      return h;
    }

    public static ExportAnswer from(JsonNode h) {
      return new ExportAnswer(h.path("pid").asLong(), h.path("slabs").asText(""));
    }
  }

  /**
   * The trace is the body; {@code originNanos} (the BECOME's start, its time zero) and {@code nowNanos} (when this
   * was written) are on the worker's {@link System#nanoTime()}.
   */
  public record TraceAnswer(long originNanos, long nowNanos) implements Reply {
    @Override
    public FrameType type() {
      return FrameType.RESULT;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      h.put("originNanos", originNanos);
      h.put("nowNanos", nowNanos);
      return h;
    }

    public static TraceAnswer from(JsonNode h) {
      return new TraceAnswer(h.path("originNanos").asLong(), h.path("nowNanos").asLong());
    }
  }

  /**
   * @param state {@code STARTING}, {@code BLANK}, {@code BECOMING}, {@code READY} or {@code INVOKING}
   * @param image the image it became, or null
   * @param queued work frames waiting behind the one that runs
   */
  public record StatusAnswer(long pid, String state, String image, long invocations, int queued) implements Reply {
    @Override
    public FrameType type() {
      return FrameType.RESULT;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      h.put("pid", pid);
      h.put("state", state);
      if (image != null) {
        h.put("image", image);
      }
      h.put("invocations", invocations);
      h.put("queued", queued);
      return h;
    }

    public static StatusAnswer from(JsonNode h) {
      return new StatusAnswer(h.path("pid").asLong(), h.path("state").asText(),
          h.hasNonNull("image") ? h.get("image").asText() : null, h.path("invocations").asLong(),
          h.path("queued").asInt());
    }
  }

  /** The EXIT is taken; the worker exits 0 next. */
  public record ExitAnswer() implements Reply {
    @Override
    public FrameType type() {
      return FrameType.RESULT;
    }
  }

  /**
   * The request with this frame's id failed (id 0: the worker itself failed and exits).
   *
   * @param exceptionType the exception's class inside the worker, or null
   * @param call the CUDA call that failed, or null; {@code code} and {@code errorName} then describe its result
   */
  public record Failure(WorkerErrorKind kind, String exceptionType, String message, String call, int code, String errorName)
      implements Reply {
    public Failure(WorkerErrorKind kind, String message) {
      this(kind, null, message, null, 0, null);
    }

    @Override
    public FrameType type() {
      return FrameType.ERROR;
    }

    @Override
    public ObjectNode toJson() {
      ObjectNode h = FrameCodec.head();
      h.put("kind", kind.name());
      if (exceptionType != null) {
        h.put("exceptionType", exceptionType);
      }
      h.put("message", message);
      if (call != null) {
        h.put("call", call);
        h.put("code", code);
        h.put("errorName", errorName);
      }
      return h;
    }

    /** An unknown kind reads as {@link WorkerErrorKind#INTERNAL}. */
    public static Failure from(JsonNode h) {
      WorkerErrorKind kind;
      try {
        kind = WorkerErrorKind.valueOf(h.path("kind").asText());
      } catch (IllegalArgumentException e) {
        kind = WorkerErrorKind.INTERNAL;
      }
      return new Failure(kind, h.hasNonNull("exceptionType") ? h.get("exceptionType").asText() : null, h.path("message").asText(),
          h.hasNonNull("call") ? h.get("call").asText() : null, h.path("code").asInt(),
          h.hasNonNull("errorName") ? h.get("errorName").asText() : null);
    }

    /** The message with the CUDA call's result after it, where there was one. */
    public String describe() {
      return call == null ? message : message + " [" + call + ": " + errorName + "]";
    }
  }

  // ---- shared forms ----

  /** Writes phases in their order; a loop of puts (no tree conversion: the BECOME's answer is on the cold path). */
  private static void putPhases(ObjectNode into, Map<String, Double> phases) {
    for (Map.Entry<String, Double> e : phases.entrySet()) {
      into.put(e.getKey(), e.getValue());
    }
  }

  /** Phases in the order they were written. */
  public static Map<String, Double> readPhases(JsonNode n) {
    Map<String, Double> phases = new LinkedHashMap<>();
    n.fields().forEachRemaining(e -> phases.put(e.getKey(), e.getValue().asDouble()));
    return phases;
  }

  private static void putStrings(ArrayNode into, List<String> values) {
    values.forEach(into::add);
  }

  private static List<String> readStrings(JsonNode n) {
    List<String> out = new ArrayList<>();
    n.forEach(v -> out.add(v.asText()));
    return out;
  }

  private static void putInts(ArrayNode into, List<Integer> values) {
    values.forEach(into::add);
  }

  private static List<Integer> readInts(JsonNode n) {
    List<Integer> out = new ArrayList<>();
    n.forEach(v -> out.add(v.asInt()));
    return out;
  }
}
