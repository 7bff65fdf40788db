package dev.thaw.pool.protocol;

import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * One message between the parent and a worker: a type, a request id, a small JSON head and an opaque body.
 *
 * @param type what the message is
 * @param id the request id a reply answers; 0 for unsolicited frames
 * @param head control fields (never large data)
 * @param body the payload: a manifest, request or response bytes; empty when none
 */
public record Frame(FrameType type, int id, ObjectNode head, byte[] body) {

  private static final byte[] NONE = new byte[0];

  public Frame {
    if (type == null || head == null) {
      throw new IllegalArgumentException("a frame needs a type and a head");
    }
    body = body == null ? NONE : body;
  }

  public Frame(FrameType type, int id, ObjectNode head) {
    this(type, id, head, NONE);
  }

  /** A frame carrying {@code head}, of the head's type. */
  public static Frame of(int id, WorkerMessages.Head head) {
    return new Frame(head.type(), id, head.toJson(), NONE);
  }

  /** A frame carrying {@code head} and {@code body}, of the head's type. */
  public static Frame of(int id, WorkerMessages.Head head, byte[] body) {
    return new Frame(head.type(), id, head.toJson(), body);
  }

  @Override
  public String toString() {
    return type + "#" + id + " " + head + (body.length == 0 ? "" : " + " + body.length + " bytes");
  }
}
