package dev.thaw.bench.coldstart;

import dev.thaw.runtime.host.Threads;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A {@code thaw serve} child process, started as a user starts it, once it says where it listens: its output kept
 * (up to 4 MiB: a long run's request log is large) for the report of a failure.
 */
record ServeChild(Process process, URI url, StringBuilder output) {

  private static final Pattern LISTENING = Pattern.compile("listening on (http://\\S+)");
  private static final int KEPT_OUTPUT = 4 << 20;

  /**
   * Starts {@code command} with {@code environment} added and waits up to {@code timeout} for its "listening on"
   * line.
   *
   * @throws IOException if it cannot start, ends, or does not listen in time (it is killed then)
   */
  static ServeChild start(List<String> command, Map<String, String> environment, Duration timeout)
      throws IOException, InterruptedException {
    ProcessBuilder pb = new ProcessBuilder(command);
    pb.environment().putAll(environment);
    pb.redirectErrorStream(true);
    Process p = pb.start();
    p.getOutputStream().close();
    CompletableFuture<URI> listening = new CompletableFuture<>();
    StringBuilder output = new StringBuilder();
    Threads.startDaemon(() -> {
      try (BufferedReader in = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
        for (String line; (line = in.readLine()) != null; ) {
          synchronized (output) {
            if (output.length() < KEPT_OUTPUT) {
              output.append(line).append('\n');
            }
          }
          Matcher m = LISTENING.matcher(line);
          if (m.find()) {
            listening.complete(URI.create(m.group(1)));
          }
        }
      } catch (IOException e) {
        listening.completeExceptionally(e);
      }
      listening.completeExceptionally(new IOException("thaw serve ended before it listened"));
    }, "thaw-serve-output");
    try {
      return new ServeChild(p, listening.get(timeout.toSeconds(), TimeUnit.SECONDS), output);
    } catch (ExecutionException | TimeoutException e) {
      p.descendants().forEach(ProcessHandle::destroyForcibly);
      p.destroyForcibly();
      synchronized (output) {
        throw new IOException("thaw serve did not start: " + Lines.abbreviate(output.toString()), e);
      }
    }
  }

  String outputText() {
    synchronized (output) {
      return output.toString();
    }
  }
}
