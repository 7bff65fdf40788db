package dev.thaw.pool.impl;

import dev.thaw.pool.PreparedImage;
import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.WorkerException;
import dev.thaw.pool.cache.ChunkPlacement;
import dev.thaw.pool.protocol.Frame;
import dev.thaw.pool.protocol.WorkerMessages.Forget;
import dev.thaw.pool.protocol.WorkerMessages.ForgetAnswer;
import dev.thaw.pool.protocol.WorkerMessages.GroupRank;
import dev.thaw.pool.protocol.WorkerMessages.Prepare;
import dev.thaw.pool.protocol.WorkerMessages.PrepareAnswer;
import java.io.ByteArrayOutputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What one blank worker holds prepared, as its parent knows it: the PREPAREs sent (answered or not), the placement
 * each carried, and the keys READY said it prepared at start. The worker tells every image it drops (PREPARE's and
 * FORGET's answers), and a key is forgotten here before the FORGET that drops it is sent, so a BECOME names only an
 * image the worker holds; should they still disagree, the worker answers NOT_PREPARED and the image goes whole.
 */
final class WorkerPrepares {

  private static final Logger LOG = LoggerFactory.getLogger(WorkerPrepares.class);

  private final WorkerPipe pipe;
  private final long pid;
  /** The worker's device, and the pool's devices: where a group it prepares goes. */
  private final int device;
  private final List<Integer> poolDevices;
  /** The devices each group PREPARE sent was for, by key. */
  private final Map<String, int[]> groups = new ConcurrentHashMap<>();
  private final int keep;
  private final Duration timeout;
  /** By key: the PREPARE's answer (a READY's for those prepared at start). */
  private final Map<String, CompletableFuture<Frame>> sent = new ConcurrentHashMap<>();
  /** The host-cache placement each PREPARE carried: a BECOME with the same one need not send it. */
  private final Map<String, ChunkPlacement> placements = new ConcurrentHashMap<>();
  /** Prepared at start, without a placement: a PREPARE may add one. */
  private final Set<String> atStart = ConcurrentHashMap.newKeySet();

  WorkerPrepares(WorkerPipe pipe, long pid, int device, List<Integer> poolDevices, int keep, Duration timeout) {
    this.pipe = pipe;
    this.pid = pid;
    this.device = device;
    this.poolDevices = List.copyOf(poolDevices);
    this.keep = Math.max(1, keep);
    this.timeout = timeout;
  }

  /** READY named these keys as prepared at start. */
  void preparedAtStart(List<String> keys) {
    for (String key : keys) {
      if (sent.putIfAbsent(key, CompletableFuture.completedFuture(null)) == null) {
        atStart.add(key);
      }
    }
  }

  /** The worker dropped its image and holds exactly {@code keys} prepared now (a RECYCLE's answer). */
  void recycled(List<String> keys) {
    sent.clear();
    groups.clear();
    placements.clear();
    atStart.clear();
    preparedAtStart(keys);
  }

  /** Sends PREPARE for {@code image} unless the worker holds it already (one prepared at start learns its placement). */
  void prepare(PreparedImage image) {
    if (image.placement() != null && atStart.remove(image.key())) {
      sent.remove(image.key());
    }
    sent.computeIfAbsent(image.key(), key -> {
      byte[] body = image.manifest();
      Prepare head = new Prepare(key, image.name(), image.manifest().length, keep);
      if (image.isGroup()) {
        body = groupBody(image.ranks());
        int[] devices = groupDevices(image.ranks().size());
        groups.put(key, devices);
        head = new Prepare(key, image.name(), -1, keep, groupRanks(image.ranks(), devices));
      } else if (image.placement() != null) {
        body = concat(image.manifest(), image.placement().toBytes());
        placements.put(key, image.placement());
      }
      CompletableFuture<Frame> f = pipe.send(head, body, timeout);
      f.whenComplete((answer, e) -> {
        if (e != null) {
          if (becameMeanwhile(e)) {
            LOG.debug("Worker {} became an image before it prepared '{}'", pid, image.name());
          } else {
            LOG.warn("Worker {} did not prepare '{}': {}", pid, image.name(), e.getMessage());
          }
          forgotten(List.of(key));
        } else {
          PrepareAnswer a = PrepareAnswer.from(answer.head());
          if (image.isGroup()) {
            // Once per group and worker, and long (a context on every other rank's device, every rank's modules).
            LOG.info("Worker {} prepared group '{}' for devices {}: {}", pid, image.name(),
                Arrays.toString(groups.get(key)), a.phases());
          }
          forgotten(a.dropped());
        }
      });
      return f;
    });
  }

  /** Drops these images on the worker (FORGET), forgetting them here first; keys it does not hold are skipped. */
  void forget(Collection<String> keys) {
    List<String> held = new ArrayList<>();
    for (String key : keys) {
      if (sent.containsKey(key)) {
        held.add(key);
      }
    }
    if (held.isEmpty()) {
      return;
    }
    forgotten(held);
    pipe.send(new Forget(held), null, timeout).whenComplete((answer, e) -> {
      if (answer != null) {
        LOG.debug("Worker {} dropped {}", pid, ForgetAnswer.from(answer.head()).dropped());
      }
    });
  }

  /** A PREPARE that reached the worker after its BECOME: it was acquired meanwhile, which is no failure. */
  private static boolean becameMeanwhile(Throwable e) {
    Throwable c = e instanceof CompletionException && e.getCause() != null ? e.getCause() : e;
    return c instanceof WorkerException w && w.kind() == WorkerErrorKind.STATE;
  }

  private void forgotten(List<String> keys) {
    for (String key : keys) {
      sent.remove(key);
      placements.remove(key);
      atStart.remove(key);
    }
  }

  /** The keys the worker holds prepared (or is preparing) as far as this side knows. */
  Set<String> keys() {
    return Set.copyOf(sent.keySet());
  }

  /**
   * Whether a BECOME may name {@code key}: a PREPARE still running is waited for (the worker would finish it before
   * any BECOME); one that failed, or none sent, means the image goes whole.
   */
  CompletableFuture<Boolean> isPrepared(String key) {
    CompletableFuture<Frame> p = sent.get(key);
    return p == null ? CompletableFuture.completedFuture(false)
        : p.handle((ok, failed) -> failed == null && sent.get(key) == p);
  }

  /** True if the worker holds {@code key} resolved with exactly this placement since its PREPARE. */
  boolean placementHolds(String key, ChunkPlacement placement) {
    ChunkPlacement prepared = placements.get(key);
    return placement != null && prepared != null
        && (placement == prepared || Arrays.equals(placement.toBytes(), prepared.toBytes()));
  }

  /** PREPAREs sent and not yet answered. */
  int pending() {
    int n = 0;
    for (CompletableFuture<Frame> f : sent.values()) {
      n += f.isDone() ? 0 : 1;
    }
    return n;
  }

  /** Waits up to {@code nanos} for every PREPARE sent so far to be answered; false if one is still running. */
  boolean awaitAll(long nanos) throws InterruptedException {
    try {
      CompletableFuture.allOf(sent.values().toArray(CompletableFuture[]::new))
          .handle((ok, failed) -> null).get(nanos, TimeUnit.NANOSECONDS);
      return true;
    } catch (TimeoutException e) {
      return false;
    } catch (ExecutionException e) {
      return true;
    }
  }

  /** A group's body: each rank's manifest, then its placement (maybe none), in rank order. */
  static byte[] groupBody(List<PreparedImage> ranks) {
    ByteArrayOutputStream body = new ByteArrayOutputStream();
    for (PreparedImage r : ranks) {
      body.writeBytes(r.manifest());
      body.writeBytes(placementBytes(r.placement()));
    }
    return body.toByteArray();
  }

  /** A group PREPARE's ranks, for {@link #groupBody}: each rank's tag, device and lengths (no source). */
  private static List<GroupRank> groupRanks(List<PreparedImage> ranks, int[] devices) {
    List<GroupRank> out = new ArrayList<>();
    for (int r = 0; r < ranks.size(); r++) {
      PreparedImage p = ranks.get(r);
      out.add(new GroupRank(p.name(), devices[r], null, p.manifest().length, placementBytes(p.placement()).length));
    }
    return out;
  }

  /**
   * The devices this worker prepares a group of {@code ranks} for: its own, then the pool's next ones in ordinal
   * order, cyclically (a placement of the group's ranks on consecutive devices from this one, the scheduler's first
   * choice on an idle node). Rank r's at r.
   */
  private int[] groupDevices(int ranks) {
    List<Integer> all = poolDevices.stream().sorted().toList();
    int at = Math.max(0, all.indexOf(device));
    int[] out = new int[ranks];
    for (int r = 0; r < ranks; r++) {
      out[r] = all.get((at + r) % all.size());
    }
    return out;
  }

  /** The devices this worker prepared group {@code key} for, rank r's at r, or null when it was not sent one. */
  int[] preparedDevices(String key) {
    return sent.containsKey(key) ? groups.get(key) : null;
  }

  private static byte[] placementBytes(ChunkPlacement placement) {
    return placement == null ? new byte[0] : placement.toBytes();
  }

  static byte[] concat(byte[] a, byte[] b) {
    if (b.length == 0) {
      return a;
    }
    byte[] out = Arrays.copyOf(a, a.length + b.length);
    System.arraycopy(b, 0, out, a.length, b.length);
    return out;
  }
}
