package dev.thaw.cli;

import static dev.thaw.server.ServerFixture.get;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.server.ChatModel;
import dev.thaw.server.ServerFixture;
import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The official OpenAI JS SDK (npm {@code openai} 6.x, installed by {@code scripts/install-test-tools.sh openai} into
 * {@code target/}) against a {@code thaw serve} child on loopback, on the sim device, serving a tiny Llama with a
 * tokenizer and a chat template: models, completions, sampling, chat, a stream with its usage, a longer stream whose
 * chunks arrive spread over its generation (one by one as tokens are decoded, not in one burst at the end), and the
 * SDK's error classes for an unknown model, a bad parameter, a prompt past the context and an unknown path. Skipped, saying why,
 * where node or the SDK cannot be had.
 */
class OpenAiSdkTest {

  @TempDir
  Path dir;

  Process child;
  Path log;

  @AfterEach
  void kill() throws Exception {
    if (child != null && child.isAlive()) {
      child.destroyForcibly().waitFor(30, TimeUnit.SECONDS);
    }
  }

  private static Path repository() {
    Path here = Path.of("").toAbsolutePath();
    return Files.isDirectory(here.resolve("scripts")) ? here : here.getParent();
  }

  /** The SDK's node_modules, installed by the project's script; the test is skipped with the script's reason. */
  private static Path sdk() throws Exception {
    Path repo = repository();
    Process p = new ProcessBuilder("bash", repo.resolve("scripts/install-test-tools.sh").toString(), "openai")
        .redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    boolean done = p.waitFor(300, TimeUnit.SECONDS);
    Assumptions.assumeTrue(done && p.exitValue() == 0, () -> "the OpenAI JS SDK cannot be installed: " + out.strip());
    return repo.resolve("target/test-tools/openai/node_modules");
  }

  @Test
  void theOfficialSdkDrivesCompletionsChatStreamingModelsAndErrors() throws Exception {
    Path modules = sdk();
    Path model = ChatModel.write(dir.resolve("llama"), true);
    try (RocksChunkStore store = ServerFixture.openStore(dir.resolve("store"))) {
      ServerFixture.build(store, "chat:1", "dev.thaw.examples.llama.LlamaFunction", "{\"path\": \"" + model
          + "\", \"maxBatch\": 4, \"maxTokens\": 128}", null, 0);
    }
    int port;
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort();
    }
    List<String> command = new ArrayList<>(List.of(ProcessHandle.current().info().command().orElse("java"),
        "-Xmx384m", "-cp", System.getProperty("java.class.path"), ThawCli.class.getName(), "serve", "--device", "sim",
        "--instances", "in-process", "--host", "127.0.0.1", "--port", Integer.toString(port), "--function",
        "chat=chat:1"));
    log = dir.resolve("serve.log");
    ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile());
    pb.environment().put("THAW_STORE", dir.resolve("store").toString());
    child = pb.start();
    awaitReady(port);

    Path script = dir.resolve("openai-sdk-check.mjs");
    try (InputStream in = OpenAiSdkTest.class.getResourceAsStream("openai-sdk-check.mjs")) {
      Files.write(script, in.readAllBytes());
    }
    Process node = new ProcessBuilder("node", script.toString(), modules.toString(), "http://127.0.0.1:" + port
        + "/v1", "chat", Integer.toString(ChatModel.EOT)).redirectErrorStream(true).start();
    String out = new String(node.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(node.waitFor(120, TimeUnit.SECONDS), "the SDK check hung");
    assertEquals(0, node.exitValue(), () -> out + "\n" + read());
    String last = out.strip().lines().reduce((a, b) -> b).orElse("");
    JsonNode result = ServerFixture.JSON.readTree(last);
    assertTrue(result.path("ok").asBoolean(), out);
    assertEquals(404, result.get("seen").get("unknown model").get("status").asInt());
    assertEquals("model_not_found", result.get("seen").get("unknown model").get("code").asText());
    assertEquals(400, result.get("seen").get("bad temperature").get("status").asInt());
    assertTrue(result.get("seen").get("stream").get("chunks").asInt() >= 3, out);
    assertTrue(result.get("seen").get("paced").get("spreadShare").asDouble() >= 0.5, out);
  }

  private void awaitReady(int port) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
    while (System.nanoTime() < deadline) {
      assertTrue(child.isAlive(), () -> "thaw serve exited: " + read());
      try {
        if (get(port, "/v2/health/ready").statusCode() == 200) {
          return;
        }
      } catch (ConnectException notYet) {
        // Not listening yet.
      }
      Thread.sleep(50);
    }
    throw new AssertionError("never ready: " + read());
  }

  private String read() {
    try {
      return Files.readString(log);
    } catch (IOException e) {
      return e.toString();
    }
  }
}
