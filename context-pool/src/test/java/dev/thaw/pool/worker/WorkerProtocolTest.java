package dev.thaw.pool.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.pool.protocol.Frame;
import dev.thaw.pool.protocol.FrameCodec;
import dev.thaw.pool.protocol.FrameType;
import dev.thaw.pool.protocol.WorkerMessages;
import dev.thaw.pool.WorkerErrorKind;
import java.io.DataInputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins the worker's side of the protocol against a bare {@link WorkerMain} process: READY first, STATUS answered,
 * garbage on stdin answered with one PROTOCOL error and an exit (never a hang), end of stdin an exit.
 */
class WorkerProtocolTest {

  @TempDir Path dir;

  private Process start() throws Exception {
    String javaBin = ProcessHandle.current().info().command().orElse("java");
    WorkerConfig config = new WorkerConfig(null, 0, null, 5, null, null, 1 << 20, ProcessHandle.current().pid(),
        System.nanoTime());
    return new ProcessBuilder(javaBin, "-XX:+DisplayVMOutputToStderr", "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"), WorkerMain.class.getName(),
        config.toJson()).redirectError(dir.resolve("worker.log").toFile()).start();
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
