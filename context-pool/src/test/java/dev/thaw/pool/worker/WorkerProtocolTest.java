package dev.thaw.pool.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.pool.protocol.Frame;
import dev.thaw.pool.protocol.FrameCodec;
import dev.thaw.pool.protocol.FrameType;
import dev.thaw.pool.protocol.WorkerMessages;
import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.protocol.WorkerMessages.BecomeGroup;
import dev.thaw.pool.protocol.WorkerMessages.GroupRank;
import java.io.DataInputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins the worker's side of the protocol against a bare {@link WorkerMain} process: READY first, STATUS answered,
 * garbage on stdin answered with one PROTOCOL error and an exit (never a hang), end of stdin an exit, a BECOME_GROUP it
 * cannot serve refused naming why with the worker still blank.
 */
class WorkerProtocolTest {

  @TempDir Path dir;

  private Process start() throws Exception {
    return start(Map.of());
  }

  private Process start(Map<String, String> environment) throws Exception {
    String javaBin = ProcessHandle.current().info().command().orElse("java");
    WorkerConfig config = new WorkerConfig(null, 0, null, 5, null, null, 1 << 20, ProcessHandle.current().pid(),
        System.nanoTime());
    ProcessBuilder b = new ProcessBuilder(javaBin, "-XX:+DisplayVMOutputToStderr", "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"), WorkerMain.class.getName(),
        config.toJson()).redirectError(dir.resolve("worker.log").toFile());
    b.environment().putAll(environment);
    return b.start();
  }

  private static Frame read(Process p) throws Exception {
    return FrameCodec.read(new DataInputStream(p.getInputStream()), 1 << 20);
  }

  @Test
  void garbageOnStdinGetsOneProtocolErrorAndAnExit() throws Exception {
    Process p = start();
    try {
      Frame ready = read(p);
      assertEquals(FrameType.READY, ready.type(), ready.toString());
      assertEquals(p.pid(), ready.head().get("pid").asLong());
      assertTrue(ready.head().get("phases").has("warmup"), ready.toString());

      OutputStream in = p.getOutputStream();
      FrameCodec.write(in, new Frame(FrameType.STATUS, 5, FrameCodec.head()));
      Frame status = read(p);
      assertEquals(FrameType.RESULT, status.type());
      assertEquals(5, status.id());
      assertEquals("BLANK", status.head().get("state").asText());

      in.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
      in.flush();
      Frame error = read(p);
      assertEquals(FrameType.ERROR, error.type());
      assertEquals(0, error.id());
      assertEquals("PROTOCOL", error.head().get("kind").asText());
      assertTrue(error.head().get("message").asText().contains("magic"), error.toString());
      assertTrue(p.waitFor(60, TimeUnit.SECONDS), "the worker exits after garbage");
      assertEquals(WorkerMain.EXIT_PROTOCOL, p.exitValue());
    } finally {
      p.destroyForcibly();
    }
  }

  @Test
  void aBecomeOfAnImageTheWorkerDoesNotHoldPreparedIsRefusedAndLeavesItBlank() throws Exception {
    Process p = start();
    try {
      assertEquals(FrameType.READY, read(p).type());
      OutputStream in = p.getOutputStream();
      WorkerMessages.Become become = new WorkerMessages.Become("gone", new WorkerMessages.Source("store",
          dir.toString(), null), 0, false, "gone@sha256:00", false);
      FrameCodec.write(in, Frame.of(7, become));
      Frame error = read(p);
      assertEquals(FrameType.ERROR, error.type(), error.toString());
      assertEquals(7, error.id());
      assertEquals(WorkerErrorKind.NOT_PREPARED, WorkerMessages.Failure.from(error.head()).kind(), error.toString());
      FrameCodec.write(in, Frame.of(8, new WorkerMessages.Status()));
      Frame status = read(p);
      assertEquals("BLANK", WorkerMessages.StatusAnswer.from(status.head()).state(), "still blank: " + status);
    } finally {
      p.destroyForcibly();
    }
  }

  @Test
  void aBecomeGroupTheWorkerCannotServeIsRefusedNamingWhyAndLeavesItBlank() throws Exception {
    Process p = start(Map.of("THAW_SIM_DEVICES", "2"));
    try {
      assertEquals(FrameType.READY, read(p).type());
      OutputStream in = p.getOutputStream();
      WorkerMessages.Source store = new WorkerMessages.Source("store", dir.toString(), null);
      int id = 10;
      Map<String, List<GroupRank>> refused = new LinkedHashMap<>();
      refused.put("a group has two ranks or more, not 1", List.of(new GroupRank("r0", 0, store, 0, 0)));
      refused.put("rank 0 goes to device 1, and this worker runs on 0",
          List.of(new GroupRank("r0", 1, store, 0, 0), new GroupRank("r1", 0, store, 0, 0)));
      refused.put("rank 1's device 0 is another rank's too",
          List.of(new GroupRank("r0", 0, store, 0, 0), new GroupRank("r1", 0, store, 0, 0)));
      refused.put("rank 1's device 2 is not one of this node's 2",
          List.of(new GroupRank("r0", 0, store, 0, 0), new GroupRank("r1", 2, store, 0, 0)));
      refused.put("rank 1 names no source",
          List.of(new GroupRank("r0", 0, store, 0, 0), new GroupRank("r1", 1, null, 0, 0)));
      refused.put("rank 0 comes without its manifest",
          List.of(new GroupRank("r0", 0, store, 0, 0), new GroupRank("r1", 1, store, 0, 0)));
      refused.put("rank 0 says its manifest has 100 bytes and its placement 0, past the body's 0",
          List.of(new GroupRank("r0", 0, store, 100, 0), new GroupRank("r1", 1, store, 0, 0)));
      refused.put("is placed in the host cache, and this worker maps none", List.of(new GroupRank("r0", 0,
          new WorkerMessages.Source("cache", dir.toString(), null), 0, 0), new GroupRank("r1", 1, store, 0, 0)));
      for (Map.Entry<String, List<GroupRank>> c : refused.entrySet()) {
        FrameCodec.write(in, Frame.of(++id, new BecomeGroup("g", c.getValue(), false, null), new byte[0]));
        Frame error = read(p);
        assertEquals(FrameType.ERROR, error.type(), error.toString());
        assertEquals(id, error.id());
        WorkerMessages.Failure f = WorkerMessages.Failure.from(error.head());
        assertEquals(WorkerErrorKind.IMAGE, f.kind(), error.toString());
        assertTrue(f.message().contains(c.getKey()), c.getKey() + ": " + error);
        FrameCodec.write(in, Frame.of(++id, new WorkerMessages.Status()));
        Frame status = read(p);
        assertEquals("BLANK", WorkerMessages.StatusAnswer.from(status.head()).state(), "still blank: " + status);
      }
      // A prepared group it does not hold: NOT_PREPARED, so that the parent sends it whole.
      FrameCodec.write(in, Frame.of(++id, new BecomeGroup("g", List.of(new GroupRank("r0", 0, store, 0, 0),
          new GroupRank("r1", 1, store, 0, 0)), false, "g@sha256:00"), new byte[0]));
      Frame error = read(p);
      assertEquals(WorkerErrorKind.NOT_PREPARED, WorkerMessages.Failure.from(error.head()).kind(), error.toString());
      FrameCodec.write(in, Frame.of(++id, new WorkerMessages.Status()));
      assertEquals("BLANK", WorkerMessages.StatusAnswer.from(read(p).head()).state());
      assertTrue(p.isAlive(), "none of it ended the worker");
    } finally {
      p.destroyForcibly();
    }
  }

  @Test
  void aTruncatedFrameThenEndOfStdinIsAnExitNotAHang() throws Exception {
    Process p = start();
    try {
      assertEquals(FrameType.READY, read(p).type());
      OutputStream in = p.getOutputStream();
      in.write(new byte[] {0x54, 0x57, 1, 3, 0, 0});
      in.close();
      assertTrue(p.waitFor(60, TimeUnit.SECONDS), "the worker exits");
      assertEquals(WorkerMain.EXIT_PROTOCOL, p.exitValue(), "a frame cut short is a protocol error");
    } finally {
      p.destroyForcibly();
    }
  }

  @Test
  void endOfStdinEndsTheWorker() throws Exception {
    Process p = start();
    try {
      assertEquals(FrameType.READY, read(p).type());
      p.getOutputStream().close();
      assertTrue(p.waitFor(60, TimeUnit.SECONDS), "the worker exits when its parent's pipe closes");
      assertEquals(WorkerMain.EXIT_PARENT_GONE, p.exitValue());
    } finally {
      p.destroyForcibly();
    }
  }

  @Test
  void aFrameOfTheWrongDirectionIsRefused() throws Exception {
    Process p = start();
    try {
      assertEquals(FrameType.READY, read(p).type());
      FrameCodec.write(p.getOutputStream(), new Frame(FrameType.RESULT, 3, FrameCodec.head()));
      Frame error = read(p);
      assertEquals("PROTOCOL", error.head().get("kind").asText());
      assertTrue(error.head().get("message").asText().contains("RESULT"), error.toString());
      assertTrue(p.waitFor(60, TimeUnit.SECONDS));
    } finally {
      p.destroyForcibly();
    }
  }
}
