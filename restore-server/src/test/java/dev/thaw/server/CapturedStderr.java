package dev.thaw.server;

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

/**
 * What this process writes to stderr (the server's log: slf4j-simple writes there) while it is open, still
 * passed on to the stderr it replaced.
 */
final class CapturedStderr implements AutoCloseable {

  private final PrintStream original = System.err;
  private final ByteArrayOutputStream captured = new ByteArrayOutputStream();

  CapturedStderr() {
    OutputStream tee = new OutputStream() {
      @Override
      public void write(int b) {
        synchronized (captured) {
          captured.write(b);
        }
        original.write(b);
      }

      @Override
      public void write(byte[] b, int off, int len) {
        synchronized (captured) {
          captured.write(b, off, len);
        }
        original.write(b, off, len);
      }
    };
    System.setErr(new PrintStream(tee, true, StandardCharsets.UTF_8));
  }

  /** Everything written so far. */
  String text() {
    synchronized (captured) {
      return captured.toString(StandardCharsets.UTF_8);
    }
  }

  /** Waits (10 s at most) for {@code part} to be written: the request log is written every 10 ms. */
  String await(String part) throws InterruptedException {
    for (int i = 0; i < 1000 && !text().contains(part); i++) {
      Thread.sleep(10);
    }
    return text();
  }

  /**
   * The server's error log line for the request {@code id} ({@code dev.thaw.server.errors}: the full message a
   * 5xx body leaves out), waiting for it as {@link #await} does; empty if there is none.
   */
  String errorLogged(String id) throws InterruptedException {
    String text = await("request " + id + " ");
    int at = text.indexOf("request " + id + " ");
    if (at < 0) {
      return "";
    }
    int end = text.indexOf("\n[", at);
    return text.substring(at, end < 0 ? text.length() : end);
  }

  @Override
  public void close() {
    System.setErr(original);
  }
}
