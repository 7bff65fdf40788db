package dev.thaw.bench.coldstart;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The PyTorch side of the harness: {@code coldstart.py} (a resource of this jar, written into the work folder)
 * run by {@code python3}. It decides whether PyTorch can run here at all ({@link #prepare}), and runs the
 * PyTorch contenders' processes.
 */
final class PythonSide {

  static final String SCRIPT_RESOURCE = "/dev/thaw/bench/coldstart/coldstart.py";

  private final String python;
  private final Path script;

  private PythonSide(String python, Path script) {
    this.python = python;
    this.script = script;
  }

  /** Writes the script into {@code work}. */
  static PythonSide extract(String python, Path work) throws IOException {
    Path script = work.resolve("coldstart.py");
    try (InputStream in = PythonSide.class.getResourceAsStream(SCRIPT_RESOURCE)) {
      if (in == null) {
        throw new IOException(SCRIPT_RESOURCE + " is not on the class path");
      }
      Files.copy(in, script, StandardCopyOption.REPLACE_EXISTING);
    }
    return new PythonSide(python, script);
  }

  List<String> command(String... args) {
    List<String> c = new ArrayList<>(List.of(python, script.toString()));
    c.addAll(List.of(args));
    return c;
  }

  /**
   * Runs {@code prepare}: whether torch sees a GPU, the GPT-2 weights saved by {@code save_pretrained}
   * ({@code gpt2} maps a model name to its folder), the pinned host-to-device bandwidth.
   *
   * @return what it printed; {@code usable} false with a {@code reason} when PyTorch cannot run here
   */
  JsonNode prepare(Map<String, Path> gpt2, long seed, Duration timeout) throws IOException, InterruptedException {
    List<String> c = command("prepare", "--bandwidth", "--seed", Long.toString(seed));
    gpt2.forEach((name, dir) -> c.addAll(List.of("--gpt2", name + "=" + dir)));
    Child child;
    try {
      child = Child.run(c, Map.of(), timeout);
    } catch (IOException e) {
      if (e instanceof Child.TimeoutException) {
        throw e;
      }
      return ColdStartResult.JSON.createObjectNode().put("usable", false)
          .put("reason", "cannot start " + python + ": " + e.getMessage());
    }
    if (child.exit() != 0) {
      throw new IOException("coldstart.py prepare failed: " + child.failure());
    }
    return Lines.last(child.stdout());
  }
}
