package dev.thaw.runtime.gpu.contract;

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
 * Runs {@link ContractChild} in a second JVM with this one's class path: for what must happen in another
 * process (the same device address there) or must not happen in this one (a poisoned CUDA context).
 */
final class ChildJvm {

  record Result(int exitCode, Map<String, String> values, String output) {

    String get(String key) {
      String v = values.get(key);
      if (v == null) {
        throw new AssertionError("child printed no '" + key + "'; its output was:\n" + output);
      }
      return v;
    }
  }

  private ChildJvm() {}

  static Result run(String driver, String... args) throws IOException, InterruptedException {
    String java = ProcessHandle.current().info().command().orElse("java");
    List<String> command = new ArrayList<>(List.of(java, "-cp", System.getProperty("java.class.path"),
        ContractChild.class.getName(), driver));
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
