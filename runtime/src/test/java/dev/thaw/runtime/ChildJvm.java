package dev.thaw.runtime;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * Runs a test class's {@code main} in a second JVM with this one's class path (and its {@code java}): for what must
 * happen in another process (the same device address there) or must not happen in this one (a poisoned CUDA
 * context). The child prints {@code result.K=V} lines.
 */
public final class ChildJvm {

  public record Result(int exitCode, Map<String, String> values, String output) {

    public String get(String key) {
      String v = values.get(key);
      if (v == null) {
        throw new AssertionError("child printed no '" + key + "'; its output was:\n" + output);
      }
      return v;
    }
  }

  private ChildJvm() {}

  public static Result run(Class<?> main, String... args) throws IOException, InterruptedException {
    String java = ProcessHandle.current().info().command().orElse("java");
    List<String> command = new ArrayList<>(List.of(java, "-Xmx256m", "-cp", System.getProperty("java.class.path"),
        main.getName()));
    command.addAll(List.of(args));
    Path log = Files.createTempFile("thaw-child", ".log");
    try {
      Process p = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
      if (!p.waitFor(120, TimeUnit.SECONDS)) {
        p.destroyForcibly();
        throw new AssertionError("child JVM did not finish in 120 s: " + command);
      }
      String output = Files.readString(log, StandardCharsets.UTF_8);
      Map<String, String> values = new HashMap<>();
      for (String line : output.split("\n")) {
        if (line.startsWith("result.")) {
          int eq = line.indexOf('=');
          values.put(line.substring("result.".length(), eq), line.substring(eq + 1).strip());
        }
      }
      return new Result(p.exitValue(), values, output);
    } finally {
      Files.deleteIfExists(log);
    }
  }
}
