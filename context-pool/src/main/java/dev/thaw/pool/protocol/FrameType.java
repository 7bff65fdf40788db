package dev.thaw.pool.protocol;

/** The kinds of frame the parent and a worker exchange; the byte is what travels. */
public enum FrameType {
  /** Worker → parent, unsolicited, id 0: started and warm; the head holds the start-up phases. */
  READY(1),
  /** Parent → worker: restore the image whose manifest is the body, from the source the head names. */
  BECOME(2),
  /** Parent → worker: one request; the head says how many body bytes are JSON, the rest is raw. */
  INVOKE(3),
  /** Parent → worker: what are you doing. Answered even while a BECOME or INVOKE runs. */
  STATUS(4),
  /** Parent → worker: answer, then exit 0. */
  EXIT(5),
  /**
   * Worker → parent, after the RESULT of a BECOME, with its id: every byte of the image is on the device now; the
   * head says how long that took and where the bytes came from.
   */
  RESIDENT(6),
  /**
   * Parent → worker, once its image is resident and it is idle: export the read-only slabs' physical memory as
   * descriptors (the RESULT's head: {@code pid}, {@code slabs} encoded) for the HBM tier, which takes them before
   * the worker exits or drops the image (RECYCLE).
   */
  EXPORT(7),
  /**
   * Parent → worker, while it is blank: prepare the image whose manifest is the body (a chunk placement after it,
   * when the head says {@code manifestBytes}), so that a later BECOME naming its {@code key} only maps and copies.
   * The RESULT's head has the phases; an ERROR leaves the worker blank and usable.
   */
  PREPARE(8),
  /**
   * Parent → worker, once its image is resident: the restore's timeline (the BECOME's phases, the copies, the first
   * launch) as Chrome trace. The head may cap the copy spans ({@code maxSpans}); the RESULT's head has
   * {@code originNanos} (the BECOME's start, time zero of the trace) and {@code nowNanos} (when it answered), both on
   * the worker's {@link System#nanoTime()}; its body is the trace's JSON. Runs on the main thread, after the INVOKEs
   * sent before it.
   */
  TRACE(9),
  /**
   * Worker → parent, while the INVOKE with the same id runs, when the head of that INVOKE asked for it
   * ({@code nearMicros} after the invoke began): its RESULT is due soon, so the reader should stay awake for it.
   * It may arrive after the RESULT (the invoke ended first); it is then ignored.
   */
  NEAR(10),
  /**
   * Parent → worker, while it is blank: drop the prepared images the head names (they fell out of what the pool
   * prepares ahead). The RESULT names those it held.
   */
  FORGET(11),
  /**
   * Worker → parent, with the id of an INVOKE whose head asked to {@code stream}, while it runs: one part of its
   * response (the body, JSON), in the order the function sent them, all before its RESULT.
   */
  PART(12),
  /**
   * Parent → worker, with the id of an INVOKE it sent: the caller went away. The worker's reader takes it at once (it
   * never waits behind work); the function ends that request at its next safe point and answers it as usual. Ignored
   * for a request already answered. Never answered itself.
   */
  CANCEL(13),
  /**
   * Parent → worker, once its image is idle and it was released: drop the image and become blank again (stop the
   * function, scrub and free its device memory but what the HBM tier keeps, unload its modules, forget its state),
   * keeping the context, the address arena, the restore's resources and the host cache. The RESULT says what it
   * scrubbed and what it still holds; an ERROR means it could not, and the parent ends it.
   */
  RECYCLE(14),
  /**
   * Parent → worker, while it is blank: restore a group image's ranks, each onto a device of its own (the head names
   * them; the body holds each rank's manifest and host-cache placement), and serve the group from then on. Answered as
   * BECOME is; a worker that became a group is never recycled (it holds contexts on its ranks' devices) and exits
   * when released.
   */
  BECOME_GROUP(15),
  /** Worker → parent: the answer to the request with the same id. */
  RESULT(16),
  /** Worker → parent: the request with the same id failed (id 0: the worker itself failed and exits). */
  ERROR(17);

  private final int code;

  FrameType(int code) {
    this.code = code;
  }

  public int code() {
    return code;
  }

  /** The type with that byte, or null when none has it. */
  public static FrameType of(int code) {
    for (FrameType t : values()) {
      if (t.code == code) {
        return t;
      }
    }
    return null;
  }
}
