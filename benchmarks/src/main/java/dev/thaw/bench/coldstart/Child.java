package dev.thaw.bench.coldstart;

import dev.thaw.runtime.host.Threads;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A child process the harness starts, timed from just before it is spawned. Its first byte on stdout marks its
 * first response: each contender's process prints nothing there before its response.
 *
 * @param command what ran
 * @param exit its exit status
 * @param firstOutputMillis from the spawn to the first byte on stdout, or -1 if it printed nothing
 * @param exitMillis from the spawn to its exit
 * @param stdout all it printed on stdout
 * @param stderr all it printed on stderr
 */
record Child(List<String> command, int exit, double firstOutputMillis, double exitMillis, String stdout,
    String stderr) {

  /** The child did not finish in time; it has been killed. */
  static final class TimeoutException extends IOException {
    TimeoutException(String message) {
      super(message);
    }
  }

  /**
   * Runs {@code command} to its end with {@code environment} added to the harness's own.
   *
   * @throws TimeoutException if it runs past {@code timeout} (it is killed first)
   */
  static Child run(List<String> command, Map<String, String> environment, Duration timeout)
      throws IOException, InterruptedException {
    ProcessBuilder pb = new ProcessBuilder(command);
    pb.environment().putAll(environment);
    AtomicLong firstByte = new AtomicLong(-1);
    long start = System.nanoTime();
    Process p = pb.start();
    p.getOutputStream().close();
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    ByteArrayOutputStream err = new ByteArrayOutputStream();
    Thread outReader = drain(p.getInputStream(), out, firstByte);
    Thread errReader = drain(p.getErrorStream(), err, null);
    if (!p.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
      p.descendants().forEach(ProcessHandle::destroyForcibly);
      p.destroyForcibly();
      p.waitFor();
      throw new TimeoutException(String.join(" ", command) + " ran past " + timeout.toSeconds() + " s and was killed");
    }
    long end = System.nanoTime();
    outReader.join();
    errReader.join();
    long first = firstByte.get();
    return new Child(List.copyOf(command), p.exitValue(), first < 0 ? -1 : (first - start) / 1e6, (end - start) / 1e6,
        out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
  }

  private static Thread drain(InputStream in, ByteArrayOutputStream sink, AtomicLong firstByte) {
    Thread t = Threads.startDaemon(() -> {
      byte[] buf = new byte[8192];
      try (in) {
        for (int n; (n = in.read(buf)) > 0; ) {
          if (firstByte != null) {
            firstByte.compareAndSet(-1, System.nanoTime());
          }
          synchronized (sink) {
            sink.write(buf, 0, n);
          }
        }
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }, "child-output");
    return t;
  }

  /** The last lines of stderr (or stdout), for a failure's reason. */
  String tail() {
    String text = stderr.isBlank() ? stdout : stderr;
    String[] lines = text.strip().split("\n");
    int from = Math.max(0, lines.length - 6);
    return String.join(" | ", List.of(lines).subList(from, lines.length)).strip();
  }

  /** A one-line account of a failed run. */
  String failure() {
    return command.get(command.size() > 2 ? 1 : 0) + "... exited " + exit + (tail().isEmpty() ? "" : ": " + tail());
  }
}
