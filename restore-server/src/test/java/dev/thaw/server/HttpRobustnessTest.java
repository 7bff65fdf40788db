package dev.thaw.server;

import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static dev.thaw.server.ServerFixture.request;
import static dev.thaw.server.ServerFixture.send;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import java.io.OutputStream;
import java.net.Socket;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * What the server makes of requests a careless or hostile client sends, on loopback against the real store: JSON
 * with anything after its value or a key twice is refused on every API, as the CLI refuses it; every response names
 * its request (the client's id where it is sane) so that an error can be found in the log; a client that leaves
 * midway is counted, not logged as an error.
 */
class HttpRobustnessTest {

  @TempDir
  static Path dir;

  static RocksChunkStore store;
  static SimDriver driver;
  static ThawServer server;
  static int port;

  @BeforeAll
  static void start() throws Exception {
    store = ServerFixture.openStore(dir.resolve("store"));
    ServerFixture.buildMlp(store, "mlp:1");
    ServerFixture.build(store, "gpt2:tiny", ServerFixture.GPT2, "{\"model\": \"tiny\", \"seed\": 5, \"maxBatch\": 2}",
        null, 64L << 20);
    driver = SimDriver.open(new SimOptions());
    server = ThawServer.start(new ServerOptions().setPort(0).setStorePath(dir.resolve("store"))
        .addFunction("mlp", new FunctionOptions().setImage("mlp:1"))
        .addFunction("gpt2", new FunctionOptions().setImage("gpt2:tiny")), store, new InProcessInstances(driver, store));
    port = server.port();
  }

  @AfterAll
  static void stop() {
    if (server != null) {
      server.close();
    }
    driver.close();
    store.close();
  }

  @Test
  void jsonWithTrailingContentOrADuplicateKeyIsRefusedOnEveryApi() throws Exception {
    String infer = "{\"inputs\": [{\"name\": \"inputs\", \"shape\": [1, 8], \"datatype\": \"FP32\", "
        + "\"data\": [1, 2, 3, 4, 5, 6, 7, 8]}]}";
    String completion = "{\"model\": \"gpt2\", \"prompt\": [5, 17], \"max_tokens\": 2}";
    String register = "{\"image\": \"mlp:1\"}";
    record Api(String method, String path, String good) {}
    List<Api> apis = List.of(new Api("POST", "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST),
        new Api("POST", "/v2/models/mlp/infer", infer), new Api("POST", "/v1/completions", completion),
        new Api("PUT", "/v1/functions/mlp2", register));
    for (Api api : apis) {
      assertEquals(api.method().equals("PUT") ? 201 : 200, call(api.method(), api.path(), api.good()).statusCode(),
          api.path() + " takes the good body");
      String dupKey = api.good().replaceFirst("\\{", "{\"dup\": 1, \"dup\": 2, ");
      for (String bad : List.of(api.good() + " xx", api.good() + "}}}}", api.good() + " " + api.good(), dupKey)) {
        HttpResponse<String> r = call(api.method(), api.path(), bad);
        assertEquals(400, r.statusCode(), api.path() + " " + bad + "\n" + r.body());
        String message = api.path().equals("/v1/completions") ? json(r).get("error").get("message").asText()
            : json(r).get("error").asText();
        assertTrue(message.contains("not valid JSON"), r.body());
      }
    }
    // The last of two equal keys used to win silently: a duplicate 'inputs' is refused, not half-read.
    HttpResponse<String> twice = postJson(port, "/v1/functions/mlp/invoke",
        "{\"inputs\": [[1, 2]], \"inputs\": [[1, 2, 3, 4, 5, 6, 7, 8]]}");
    assertEquals(400, twice.statusCode(), twice.body());
    assertTrue(json(twice).get("error").asText().contains("Duplicate field 'inputs'"), twice.body());
  }

  @Test
  void everyResponseCarriesARequestIdWhichErrorBodiesAndTheRequestLogRepeat() throws Exception {
    try (CapturedStderr log = new CapturedStderr()) {
      HttpResponse<String> live = ServerFixture.get(port, "/v2/health/live");
      String id = live.headers().firstValue("Thaw-Request-Id").orElseThrow();
      assertTrue(id.matches("[a-z0-9]+-[a-z0-9]+"), id);
      assertNotEquals(id, ServerFixture.get(port, "/v2/health/live").headers().firstValue("Thaw-Request-Id")
          .orElseThrow(), "each request its own");

      HttpResponse<String> missing = postJson(port, "/v1/functions/nope/invoke", "{}");
      assertEquals(404, missing.statusCode());
      assertEquals(missing.headers().firstValue("Thaw-Request-Id").orElseThrow(),
          json(missing).get("requestId").asText());
      HttpResponse<String> unknownModel = postJson(port, "/v1/completions", "{\"model\": \"gpt9\", \"prompt\": \"A\"}");
      assertEquals(unknownModel.headers().firstValue("Thaw-Request-Id").orElseThrow(),
          json(unknownModel).get("error").get("requestId").asText());

      // A client's own id is kept when it is one short token, and replaced when it is not.
      HttpResponse<String> named = send(request(port, "/v1/functions/nope/invoke").header("X-Request-Id",
          "trace-4bf92f3577b34da6").header("Content-Type", "application/json")
          .POST(HttpRequest.BodyPublishers.ofString("{}")).build());
      assertEquals("trace-4bf92f3577b34da6", named.headers().firstValue("Thaw-Request-Id").orElseThrow());
      assertEquals("trace-4bf92f3577b34da6", json(named).get("requestId").asText());
      for (String insane : List.of("two words", "x".repeat(129), "\"quoted\"", "-leading")) {
        HttpResponse<String> r = send(request(port, "/v2/health/live").header("X-Request-Id", insane).GET().build());
        assertNotEquals(insane, r.headers().firstValue("Thaw-Request-Id").orElseThrow());
      }
      assertTrue(log.await("id=trace-4bf92f3577b34da6").contains("POST /v1/functions/nope/invoke 404"),
          "the request log names the id: " + log.text());
    }
  }

  @Test
  void aClientThatLeavesMidRequestIsCountedAndNotLoggedAsAnError() throws Exception {
    double before = disconnects();
    try (CapturedStderr log = new CapturedStderr()) {
      for (boolean reset : new boolean[] {false, true}) {
        try (Socket s = new Socket("127.0.0.1", port)) {
          if (reset) {
            s.setSoLinger(true, 0);
          }
          OutputStream out = s.getOutputStream();
          out.write(("POST /v1/functions/mlp/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              + "Content-Length: 1000\r\n\r\n{\"inputs\": [[1,").getBytes(StandardCharsets.US_ASCII));
          out.flush();
          Thread.sleep(50);
        }
      }
      // A kept-alive connection reset between requests: no request is lost, nothing to count, nothing to log.
      try (Socket s = new Socket("127.0.0.1", port)) {
        s.setSoLinger(true, 0);
        String body = ServerFixture.MLP_REQUEST;
        s.getOutputStream().write(("POST /v1/functions/mlp/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: "
            + "application/json\r\nContent-Length: " + body.length() + "\r\n\r\n" + body)
            .getBytes(StandardCharsets.US_ASCII));
        s.getOutputStream().flush();
        String reply = new String(s.getInputStream().readNBytes(12), StandardCharsets.US_ASCII);
        assertEquals("HTTP/1.1 200", reply);
        Thread.sleep(50);
      }
      for (int i = 0; i < 1000 && disconnects() < before + 2; i++) {
        Thread.sleep(10);
      }
      assertEquals(before + 2, disconnects(), "both counted in thaw_http_disconnects_total");
      assertEquals(200, postJson(port, "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
      String text = log.await("POST /v1/functions/mlp/invoke 200");
      assertFalse(text.contains("ERROR") || text.contains("Exception"), "a client leaving is no error:\n" + text);
    }
  }

  /** {@code thaw_http_disconnects_total}, from /metrics. */
  private static double disconnects() throws Exception {
    Matcher m = Pattern.compile("(?m)^thaw_http_disconnects_total(\\{[^}]*\\})? ([0-9.eE+]+)$")
        .matcher(ServerFixture.get(port, "/metrics").body());
    return m.find() ? Double.parseDouble(m.group(2)) : -1;
  }

  private static HttpResponse<String> call(String method, String path, String body) throws Exception {
    HttpRequest.Builder b = request(port, path).header("Content-Type", "application/json")
        .method(method, HttpRequest.BodyPublishers.ofString(body));
    if (method.equals("PUT")) {
      b.header("Authorization", "Bearer " + server.adminToken());
    }
    return send(b.build());
  }
}
