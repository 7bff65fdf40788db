package dev.thaw.server;

import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static dev.thaw.server.ServerFixture.request;
import static dev.thaw.server.ServerFixture.send;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * What the server makes of requests a careless or hostile client sends, on loopback against the real store: JSON
 * with anything after its value or a key twice is refused on every API, as the CLI refuses it.
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

  private static HttpResponse<String> call(String method, String path, String body) throws Exception {
    HttpRequest.Builder b = request(port, path).header("Content-Type", "application/json")
        .method(method, HttpRequest.BodyPublishers.ofString(body));
    if (method.equals("PUT")) {
      b.header("Authorization", "Bearer " + server.adminToken());
    }
    return send(b.build());
  }

  static JsonNode body(HttpResponse<String> r) throws Exception {
    return json(r);
  }
}
