package dev.thaw.server;

import static dev.thaw.server.ServerFixture.JSON;
import static dev.thaw.server.ServerFixture.get;
import static dev.thaw.server.ServerFixture.json;
import static dev.thaw.server.ServerFixture.postJson;
import static dev.thaw.server.ServerFixture.request;
import static dev.thaw.server.ServerFixture.send;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import java.io.ByteArrayOutputStream;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Every route of the KServe Open Inference Protocol's REST API against a real server on loopback (sim device, real
 * store): health, server and model metadata, model readiness and inference, unversioned and under
 * {@code /versions/{version}}, each GET also as HEAD; JSON tensors and the binary tensor data extension both ways;
 * and the refusals, each a 4xx with {@code {"error": ...}}. Functions: {@code mlp} (FP32 in, FP32 and INT64 out),
 * {@code echo} ({@link TensorEchoFunction}: six datatypes, answered as they came), {@code gate} (no tensors).
 */
class KServeApiTest {

  private static final String HEADER_LENGTH = "Inference-Header-Content-Length";
  private static final String MLP_INFER = "{\"id\": \"r1\", \"inputs\": [{\"name\": \"inputs\", \"shape\": [2, 8], "
      + "\"datatype\": \"FP32\", \"data\": [1, 2, 3, 4, 5, 6, 7, 8, 8, 7, 6, 5, 4, 3, 2, 1]}]}";
  private static final float[] MLP_ROWS = {1, 2, 3, 4, 5, 6, 7, 8, 8, 7, 6, 5, 4, 3, 2, 1};

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
    ServerFixture.build(store, "echo:1", TensorEchoFunction.class.getName(), "{}", null, 64L << 20);
    ServerFixture.build(store, "gate:1", GateFunction.class.getName(), "{}", null, 128L << 20);
    driver = SimDriver.open(new SimOptions());
    server = ThawServer.start(new ServerOptions().setPort(0).setMaxBodyBytes(1 << 20)
        .addFunction("mlp", new FunctionOptions().setImage("mlp:1"))
        .addFunction("echo", new FunctionOptions().setImage("echo:1"))
        .addFunction("gate", new FunctionOptions().setImage("gate:1")), store, new InProcessInstances(driver, store));
    port = server.port();
  }

  @AfterAll
  static void stop() {
    if (server != null) {
      server.close();
      assertEquals(0, server.instanceCount());
    }
    driver.close();
    store.close();
  }

  @Test
  void healthAndServerMetadataAnswerAndNameTheBinaryExtension() throws Exception {
    assertEquals("{\"live\":true}", get(port, "/v2/health/live").body());
    HttpResponse<String> ready = get(port, "/v2/health/ready");
    assertEquals(200, ready.statusCode());
    assertTrue(json(ready).get("ready").asBoolean());
    JsonNode meta = json(get(port, "/v2"));
    assertEquals("thaw", meta.get("name").asText());
    assertEquals(JSON.readTree("[\"binary_tensor_data\"]"), meta.get("extensions"));
  }

  @Test
  void modelMetadataAndReadinessAnswerUnversionedAndAtTheImageTagOnly() throws Exception {
    JsonNode meta = json(get(port, "/v2/models/mlp"));
    assertEquals("mlp", meta.get("name").asText());
    assertEquals(JSON.readTree("[\"mlp:1\"]"), meta.get("versions"));
    assertEquals(JSON.readTree("[{\"name\":\"inputs\",\"datatype\":\"FP32\",\"shape\":[-1,8]}]"), meta.get("inputs"));
    assertEquals(meta, json(get(port, "/v2/models/mlp/versions/mlp:1")), "the version metadata advertises");
    assertEquals(meta, json(get(port, "/v2/models/mlp/versions/mlp%3A1")), "the colon escaped");
    assertEquals("{\"name\":\"mlp\",\"ready\":true}", get(port, "/v2/models/mlp/ready").body());
    assertEquals("{\"name\":\"mlp\",\"ready\":true}", get(port, "/v2/models/mlp/versions/mlp:1/ready").body());

    for (String path : List.of("/v2/models/mlp/versions/mlp:2", "/v2/models/mlp/versions/2/ready",
        "/v2/models/nope", "/v2/models/nope/ready", "/v2/models/nope/versions/mlp:1")) {
      HttpResponse<String> r = get(port, path);
      assertEquals(404, r.statusCode(), path);
      assertTrue(json(r).get("error").isTextual(), path + ": the spec's {\"error\": ...}: " + r.body());
    }
    assertTrue(get(port, "/v2/models/mlp/versions/mlp:2").body().contains("it serves version 'mlp:1'"));
    assertEquals(404, postJson(port, "/v2/models/mlp/versions/mlp:0/infer", MLP_INFER).statusCode());
  }

  @Test
  void everyGetRouteAnswersHeadWithItsHeadersAndNoBody() throws Exception {
    for (String path : List.of("/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/mlp", "/v2/models/mlp/ready",
        "/v2/models/mlp/versions/mlp:1", "/v2/models/mlp/versions/mlp:1/ready", "/v1/functions",
        "/v1/functions/mlp", "/v1/functions/mlp/trace", "/metrics")) {
      HttpResponse<String> g = get(port, path);
      HttpResponse<String> h = send(request(port, path).method("HEAD", HttpRequest.BodyPublishers.noBody()).build());
      assertEquals(g.statusCode(), h.statusCode(), path);
      assertEquals(200, h.statusCode(), path);
      assertEquals("", h.body(), path);
      assertEquals(g.headers().firstValue("Content-Type"), h.headers().firstValue("Content-Type"), path);
      if (!path.equals("/metrics") && !path.endsWith("/trace")) {
        assertEquals(Integer.toString(g.body().getBytes(StandardCharsets.UTF_8).length),
            h.headers().firstValue("Content-Length").orElseThrow(), path + ": the length GET's body has");
      }
    }
    HttpResponse<String> missing = send(request(port, "/v2/models/nope").method("HEAD",
        HttpRequest.BodyPublishers.noBody()).build());
    assertEquals(404, missing.statusCode());
    assertEquals("", missing.body());
  }

  @Test
  void inferAnswersAsTheFunctionAtEitherPathWithTheOutputsAskedForInTheirOrder() throws Exception {
    JsonNode direct = json(postJson(port, "/v1/functions/mlp/invoke",
        "{\"inputs\": [[1, 2, 3, 4, 5, 6, 7, 8], [8, 7, 6, 5, 4, 3, 2, 1]]}"));
    for (String path : List.of("/v2/models/mlp/infer", "/v2/models/mlp/versions/mlp:1/infer")) {
      HttpResponse<String> r = postJson(port, path, MLP_INFER);
      assertEquals(200, r.statusCode(), r.body());
      JsonNode out = json(r);
      assertEquals("r1", out.get("id").asText());
      assertEquals("mlp", out.get("model_name").asText());
      assertEquals("mlp:1", out.get("model_version").asText());
      assertEquals(List.of("outputs", "argmax"), names(out));
      assertEquals(JSON.readTree("[2, 4]"), out.get("outputs").get(0).get("shape"));
      assertEquals(flat(direct.get("outputs")), out.get("outputs").get(0).get("data"));
      assertEquals(direct.get("argmax"), out.get("outputs").get(1).get("data"));
      assertEquals("INT64", out.get("outputs").get(1).get("datatype").asText());
    }
    JsonNode some = json(postJson(port, "/v2/models/mlp/infer", MLP_INFER.replace("}]}",
        "}], \"outputs\": [{\"name\": \"argmax\"}, {\"name\": \"outputs\"}]}")));
    assertEquals(List.of("argmax", "outputs"), names(some), "in the order asked");
    JsonNode one = json(postJson(port, "/v2/models/mlp/infer", MLP_INFER.replace("}]}",
        "}], \"outputs\": [{\"name\": \"argmax\"}]}")));
    assertEquals(List.of("argmax"), names(one));
    HttpResponse<String> nested = postJson(port, "/v2/models/mlp/infer", MLP_INFER.replace(
        "[1, 2, 3, 4, 5, 6, 7, 8, 8, 7, 6, 5, 4, 3, 2, 1]", "[[1, 2, 3, 4, 5, 6, 7, 8], [8, 7, 6, 5, 4, 3, 2, 1]]"));
    assertEquals(direct.get("argmax"), json(nested).get("outputs").get(1).get("data"), "data nested as its shape");
  }

  @Test
  void badRequestsAreRefusedWith400AndTheSpecsErrorObject() throws Exception {
    String echo = echoJson("[[1.5, 2]]", "[1]", "[true]", "[\"a\"]", "[1]", "[-3]");
    assertEquals(200, postJson(port, "/v2/models/echo/infer", echo).statusCode());
    List<String> bad = List.of(
        MLP_INFER.replace("}]}", "}], \"outputs\": [{\"name\": \"logits\"}]}"),
        MLP_INFER.replace("}]}", "}], \"outputs\": [{\"name\": \"argmax\"}, {\"name\": \"argmax\"}]}"),
        MLP_INFER.replace("}]}", "}], \"outputs\": {\"name\": \"argmax\"}}"),
        MLP_INFER.replace("}]}", "}], \"outputs\": [{\"name\": \"argmax\", \"parameters\": {\"binary_data\": 1}}]}"),
        MLP_INFER.replace("FP32", "INT32"),
        MLP_INFER.replace("[2, 8]", "[2, 7]"),
        MLP_INFER.replace("[2, 8]", "[2, -8]"),
        MLP_INFER.replace("[2, 8]", "[3, 8]"),
        MLP_INFER.replace("[2, 8]", "[8]"),
        MLP_INFER.replace("\"inputs\", \"shape\"", "\"x\", \"shape\""),
        MLP_INFER.replace(", \"data\": [1", ", \"parameters\": {\"binary_data_size\": 64}, \"data\": [1"),
        MLP_INFER.replace("\"id\": \"r1\",", "\"id\": \"r1\", \"parameters\": {\"inputs\": 1},"),
        MLP_INFER.replace("\"data\": [1,", "\"data\": [\"1\","),
        "{\"inputs\": []}", "[1, 2]",
        echoJson("[[1.5, 2]]", "[1]", "[true]", "[\"a\"]", "[1]", "[300]"),
        echoJson("[[1.5, 2]]", "[1]", "[true]", "[\"a\"]", "[-1]", "[3]"),
        echoJson("[[1.5, 2]]", "[1]", "[1]", "[\"a\"]", "[1]", "[3]"),
        echoJson("[[1.5, 2]]", "[1]", "[true]", "[7]", "[1]", "[3]"));
    for (String body : bad) {
      String path = body.contains("halves") ? "/v2/models/echo/infer" : "/v2/models/mlp/infer";
      HttpResponse<String> r = postJson(port, path, body);
      assertEquals(400, r.statusCode(), body + " -> " + r.body());
      assertTrue(json(r).get("error").isTextual(), r.body());
    }
    assertTrue(postJson(port, "/v2/models/mlp/infer", bad.get(0)).body().contains("no output tensor 'logits'"));
    assertEquals(400, postJson(port, "/v2/models/gate/infer", MLP_INFER).statusCode(), "gate declares no tensors");
    HttpResponse<String> text = send(request(port, "/v2/models/mlp/infer").header("Content-Type", "text/plain")
        .POST(HttpRequest.BodyPublishers.ofString(MLP_INFER)).build());
    assertEquals(415, text.statusCode());
    HttpResponse<String> octets = send(request(port, "/v2/models/mlp/infer").header("Content-Type",
        "application/octet-stream").POST(HttpRequest.BodyPublishers.ofByteArray(floats(MLP_ROWS))).build());
    assertEquals(400, octets.statusCode());
    assertTrue(octets.body().contains(HEADER_LENGTH), octets.body());
  }

  @Test
  void aTensorWithAZeroSizedDimensionReachesTheFunctionWhichMayRefuseIt() throws Exception {
    HttpResponse<String> r = postJson(port, "/v2/models/echo/infer", echoJson("[]", "[]", "[]", "[]", "[]", "[]")
        .replace("\"shape\": [1, 2]", "\"shape\": [0, 2]").replace("\"shape\": [1]", "\"shape\": [0]"));
    assertEquals(200, r.statusCode(), r.body());
    JsonNode floats = json(r).get("outputs").get(0);
    assertEquals(JSON.readTree("[0, 2]"), floats.get("shape"), "the declared size under an empty dimension");
    assertEquals(0, floats.get("data").size());
    assertEquals(JSON.readTree("{\"name\":\"rows\",\"datatype\":\"INT64\",\"shape\":[],\"data\":[0]}"),
        json(r).get("outputs").get(6), "a scalar output");

    HttpResponse<String> mlp = postJson(port, "/v2/models/mlp/infer",
        "{\"inputs\": [{\"name\": \"inputs\", \"shape\": [0, 8], \"datatype\": \"FP32\", \"data\": []}]}");
    assertEquals(400, mlp.statusCode(), mlp.body());
    assertTrue(json(mlp).get("error").asText().contains("at least one"), "the function's own refusal: " + mlp.body());
  }

  @Test
  void binaryInputsAndOutputsRoundTripEveryDatatypeExactly() throws Exception {
    byte[] floats = floats(1.5f, -2.25f, 3e-7f, 65504f);
    byte[] halves = ByteBuffer.allocate(6).order(ByteOrder.LITTLE_ENDIAN).putShort((short) 0x3c00)
        .putShort((short) 0x8001).putShort((short) 0x7bff).array();
    byte[] flags = {1, 0, 1};
    byte[] words = bytesElements("héllo", "", "日本");
    byte[] big = ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN).putLong(-1L).putLong(42L).array();
    byte[] small = {-128, 127};
    String header = "{\"id\": \"b\", \"parameters\": {\"binary_data_output\": true}, \"inputs\": ["
        + binaryInput("floats", "FP32", "[2, 2]", floats) + ", " + binaryInput("halves", "FP16", "[3]", halves) + ", "
        + binaryInput("flags", "BOOL", "[3]", flags) + ", " + binaryInput("words", "BYTES", "[3]", words) + ", "
        + binaryInput("big", "UINT64", "[2]", big) + ", " + binaryInput("small", "INT8", "[2]", small) + "]}";
    Binary r = postBinary("/v2/models/echo/infer", header, floats, halves, flags, words, big, small);
    assertEquals(200, r.status(), r.json().toString());
    assertEquals("b", r.json().get("id").asText());
    JsonNode outputs = r.json().get("outputs");
    assertEquals(7, outputs.size());
    List<byte[]> sent = List.of(floats, halves, flags, words, big, small, ByteBuffer.allocate(8)
        .order(ByteOrder.LITTLE_ENDIAN).putLong(2).array());
    int at = 0;
    for (int i = 0; i < sent.size(); i++) {
      JsonNode o = outputs.get(i);
      int size = o.get("parameters").get("binary_data_size").asInt();
      assertTrue(!o.has("data"), o.toString());
      assertArrayEquals(sent.get(i), Arrays.copyOfRange(r.tail(), at, at + size), o.get("name").asText());
      at += size;
    }
    assertEquals(r.tail().length, at, "the binary outputs, back to back");
    assertEquals(JSON.readTree("[2, 2]"), outputs.get(0).get("shape"));

    // The same tensors as JSON, each output as JSON unless it asks for binary data.
    String asJson = "{\"inputs\": [" + jsonInput("floats", "FP32", "[2, 2]", "[1.5, -2.25, 3e-7, 65504]") + ", "
        + jsonInput("halves", "FP16", "[3]", "[1, -5.960464477539063e-8, 65504]") + ", "
        + jsonInput("flags", "BOOL", "[3]", "[true, false, true]") + ", "
        + jsonInput("words", "BYTES", "[3]", "[\"héllo\", \"\", \"日本\"]") + ", "
        + jsonInput("big", "UINT64", "[2]", "[18446744073709551615, 42]") + ", "
        + jsonInput("small", "INT8", "[2]", "[-128, 127]")
        + "], \"outputs\": [{\"name\": \"words\", \"parameters\": {\"binary_data\": true}}, {\"name\": \"big\"}]}";
    Binary mixed = postBinary("/v2/models/echo/infer", asJson);
    assertEquals(200, mixed.status(), mixed.json().toString());
    assertEquals("words", mixed.json().get("outputs").get(0).get("name").asText());
    assertArrayEquals(words, mixed.tail());
    assertEquals(JSON.readTree("[18446744073709551615, 42]"), mixed.json().get("outputs").get(1).get("data"));
  }

  @Test
  void theMlpAnswersTheSameToBinaryInputAsToJsonAndToTheRawTensorAlone() throws Exception {
    JsonNode viaJson = json(postJson(port, "/v2/models/mlp/infer", MLP_INFER));
    byte[] rows = floats(MLP_ROWS);
    Binary viaBinary = postBinary("/v2/models/mlp/infer", "{\"inputs\": [" + binaryInput("inputs", "FP32", "[2, 8]",
        rows) + "], \"outputs\": [{\"name\": \"argmax\"}, {\"name\": \"outputs\", \"parameters\": "
        + "{\"binary_data\": true}}]}", rows);
    assertEquals(200, viaBinary.status(), viaBinary.json().toString());
    assertEquals(viaJson.get("outputs").get(1).get("data"), viaBinary.json().get("outputs").get(0).get("data"));
    assertArrayEquals(floatsOf(viaJson.get("outputs").get(0).get("data")), viaBinary.tail());

    Binary raw = postBinaryRaw("/v2/models/mlp/versions/mlp:1/infer", rows);
    assertEquals(200, raw.status(), raw.json().toString());
    JsonNode outputs = raw.json().get("outputs");
    assertEquals(JSON.readTree("[2, 4]"), outputs.get(0).get("shape"), "two rows, found from the bytes");
    JsonNode argmax = viaJson.get("outputs").get(1).get("data");
    ByteArrayOutputStream expected = new ByteArrayOutputStream();
    expected.writeBytes(floatsOf(viaJson.get("outputs").get(0).get("data")));
    expected.writeBytes(ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN).putLong(argmax.get(0).asLong())
        .putLong(argmax.get(1).asLong()).array());
    assertArrayEquals(expected.toByteArray(), raw.tail(), "every output binary");
  }

  @Test
  void badBinaryRequestsAreRefusedWith400NamingWhatIsWrong() throws Exception {
    byte[] rows = floats(MLP_ROWS);
    String header = "{\"inputs\": [" + binaryInput("inputs", "FP32", "[2, 8]", rows) + "]}";
    assertRefused(postBinary("/v2/models/mlp/infer", header, Arrays.copyOf(rows, 60)), "only 60 are left");
    assertRefused(postBinary("/v2/models/mlp/infer", header.replace("\"binary_data_size\": 64",
        "\"binary_data_size\": 60"), Arrays.copyOf(rows, 60)), "are not 16 FP32 elements");
    assertRefused(postBinary("/v2/models/mlp/infer", header, rows, new byte[3]), "3 bytes of binary data follow");
    assertRefused(postBinary("/v2/models/mlp/infer", header.replace("\"binary_data_size\": 64",
        "\"binary_data_size\": 65"), rows), "only 64 are left");
    assertRefused(postBinary("/v2/models/mlp/infer", header.replace("64", "-1"), rows), "byte count");
    float[] nan = MLP_ROWS.clone();
    nan[3] = Float.NaN;
    assertRefused(postBinary("/v2/models/mlp/infer", header, floats(nan)), "JSON cannot carry");
    assertRefused(postBinaryRaw("/v2/models/mlp/infer", Arrays.copyOf(rows, 36)), "cannot be 36 bytes");
    assertRefused(postBinaryRaw("/v2/models/echo/infer", rows), "a model of one input");

    HttpResponse<String> tooLong = send(request(port, "/v2/models/mlp/infer").header(HEADER_LENGTH, "1000")
        .POST(HttpRequest.BodyPublishers.ofString(header)).build());
    assertEquals(400, tooLong.statusCode(), tooLong.body());
    HttpResponse<String> notANumber = send(request(port, "/v2/models/mlp/infer").header(HEADER_LENGTH, "ten")
        .POST(HttpRequest.BodyPublishers.ofString(header)).build());
    assertEquals(400, notANumber.statusCode(), notANumber.body());
    HttpResponse<String> notJson = send(request(port, "/v2/models/mlp/infer").header(HEADER_LENGTH, "5")
        .POST(HttpRequest.BodyPublishers.ofString("{\"inp")).build());
    assertEquals(400, notJson.statusCode(), notJson.body());

    String echo = "{\"inputs\": [" + jsonInput("floats", "FP32", "[0, 2]", "[]") + ", "
        + jsonInput("halves", "FP16", "[0]", "[]") + ", " + binaryInput("flags", "BOOL", "[1]", new byte[1]) + ", "
        + binaryInput("words", "BYTES", "[1]", new byte[6]) + ", " + jsonInput("big", "UINT64", "[0]", "[]") + ", "
        + jsonInput("small", "INT8", "[0]", "[]") + "]}";
    byte[] badUtf8 = {2, 0, 0, 0, (byte) 0xc3, 0x28};
    assertRefused(postBinary("/v2/models/echo/infer", echo, new byte[] {2}, bytesElements("ok")), "not 0 or 1");
    assertRefused(postBinary("/v2/models/echo/infer", echo, new byte[] {1}, badUtf8), "not UTF-8");
    assertRefused(postBinary("/v2/models/echo/infer", echo, new byte[] {1}, new byte[] {9, 0, 0, 0, 1, 2}),
        "says 9 bytes");
    Binary fine = postBinary("/v2/models/echo/infer", echo, new byte[] {1}, bytesElements("ok"));
    assertEquals(200, fine.status(), fine.json().toString());
    assertEquals(JSON.readTree("[\"ok\"]"), fine.json().get("outputs").get(3).get("data"));
  }

  @Test
  void anOutputThatBreaksTheFunctionsSignatureIs500AndARefusalIsTheFunctions400() throws Exception {
    String body = echoJson("[[1.5, 2]]", "[1]", "[true]", "[\"a\"]", "[1]", "[3]");
    HttpResponse<String> ragged = postJson(port, "/v2/models/echo/infer",
        body.replace("{\"inputs\"", "{\"parameters\": {\"ragged\": true}, \"inputs\""));
    assertEquals(500, ragged.statusCode(), ragged.body());
    assertEquals("bad_function_output", json(ragged).get("code").asText());
    assertTrue(json(ragged).get("error").asText().contains("output 'floats'"), ragged.body());
    HttpResponse<String> refused = postJson(port, "/v2/models/echo/infer",
        body.replace("{\"inputs\"", "{\"parameters\": {\"refuse\": true}, \"inputs\""));
    assertEquals(400, refused.statusCode(), refused.body());
    assertEquals("refused, as asked", json(refused).get("error").asText());
    assertEquals(200, postJson(port, "/v2/models/echo/infer", body).statusCode(), "and it serves on");
  }

  // ---- helpers ----

  private static List<String> names(JsonNode response) {
    return response.get("outputs").findValuesAsText("name");
  }

  private static ArrayNode flat(JsonNode nested) {
    ArrayNode flat = JSON.createArrayNode();
    nested.forEach(row -> row.forEach(flat::add));
    return flat;
  }

  private static String echoJson(String floats, String halves, String flags, String words, String big,
      String small) {
    return "{\"inputs\": [" + jsonInput("floats", "FP32", "[1, 2]", floats) + ", "
        + jsonInput("halves", "FP16", "[1]", halves) + ", " + jsonInput("flags", "BOOL", "[1]", flags) + ", "
        + jsonInput("words", "BYTES", "[1]", words) + ", " + jsonInput("big", "UINT64", "[1]", big) + ", "
        + jsonInput("small", "INT8", "[1]", small) + "]}";
  }

  private static String jsonInput(String name, String datatype, String shape, String data) {
    return "{\"name\": \"" + name + "\", \"datatype\": \"" + datatype + "\", \"shape\": " + shape + ", \"data\": "
        + data + "}";
  }

  private static String binaryInput(String name, String datatype, String shape, byte[] bytes) {
    return "{\"name\": \"" + name + "\", \"datatype\": \"" + datatype + "\", \"shape\": " + shape
        + ", \"parameters\": {\"binary_data_size\": " + bytes.length + "}}";
  }

  private static byte[] floats(float... values) {
    ByteBuffer b = ByteBuffer.allocate(4 * values.length).order(ByteOrder.LITTLE_ENDIAN);
    for (float v : values) {
      b.putFloat(v);
    }
    return b.array();
  }

  private static byte[] floatsOf(JsonNode data) {
    float[] v = new float[data.size()];
    for (int i = 0; i < v.length; i++) {
      v[i] = data.get(i).floatValue();
    }
    return floats(v);
  }

  private static byte[] bytesElements(String... texts) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    for (String t : texts) {
      byte[] utf8 = t.getBytes(StandardCharsets.UTF_8);
      out.writeBytes(ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(utf8.length).array());
      out.writeBytes(utf8);
    }
    return out.toByteArray();
  }

  /** A response: its status, its JSON (the header before the binary outputs, or the whole body) and the bytes after. */
  private record Binary(int status, JsonNode json, byte[] tail) {}

  private static Binary postBinary(String path, String header, byte[]... tensors) throws Exception {
    ByteArrayOutputStream body = new ByteArrayOutputStream();
    byte[] head = header.getBytes(StandardCharsets.UTF_8);
    body.writeBytes(head);
    for (byte[] t : tensors) {
      body.writeBytes(t);
    }
    return post(path, head.length, body.toByteArray());
  }

  private static Binary postBinaryRaw(String path, byte[] tensor) throws Exception {
    return post(path, 0, tensor);
  }

  private static Binary post(String path, int headerLength, byte[] body) throws Exception {
    HttpResponse<byte[]> r = ServerFixture.CLIENT.send(request(port, path).header("Content-Type",
        "application/octet-stream").header(HEADER_LENGTH, Integer.toString(headerLength))
        .POST(HttpRequest.BodyPublishers.ofByteArray(body)).build(), HttpResponse.BodyHandlers.ofByteArray());
    int json = r.headers().firstValue(HEADER_LENGTH).map(Integer::parseInt).orElse(r.body().length);
    if (r.headers().firstValue(HEADER_LENGTH).isPresent()) {
      assertEquals("application/octet-stream", r.headers().firstValue("Content-Type").orElseThrow());
    }
    return new Binary(r.statusCode(), JSON.readTree(Arrays.copyOf(r.body(), json)),
        Arrays.copyOfRange(r.body(), json, r.body().length));
  }

  private static void assertRefused(Binary r, String why) {
    assertEquals(400, r.status(), r.json().toString());
    assertTrue(r.json().get("error").asText().contains(why), "'" + why + "' in " + r.json());
  }
}
