package dev.thaw.server.proxy;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.registry.RegistryOptions;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.FunctionOptions;
import dev.thaw.server.ServerFixture;
import dev.thaw.server.ServerOptions;
import dev.thaw.server.TenantLimits;
import dev.thaw.server.ThawServer;
import dev.thaw.server.impl.InProcessInstances;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.net.http.HttpResponse;
import java.nio.channels.ServerSocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.function.Predicate;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The node socket of a {@link ThawServer} (node mode) on the real store and the sim device, without a registry: how
 * the socket is made, replaced, refused and removed; what it serves and what it does not (the admin API, metrics);
 * how tenants register (a key, a registry reference, the node's limits) and how a tenant's function hides from every
 * request without its token; and a function whose image cannot be pulled (a registry that is not there): listed,
 * refused with 502 saying why, retried by registering again, never a hang.
 */
class NodeServerTest {

  static final String ADMIN = "admin-token-0123456789";
  static final String KEY_A = "tenant-a-key-0123456789";
  static final String KEY_B = "tenant-b-key-0123456789";

  @TempDir
  Path dir;

  RocksChunkStore store;
  SimDriver driver;
  final List<ThawServer> servers = new ArrayList<>();
  Path socket;
  String nowhere;

  @BeforeEach
  void images() throws Exception {
    store = ServerFixture.openStore(dir.resolve("store"));
    ServerFixture.buildMlp(store, "mlp:1");
    driver = SimDriver.open(new SimOptions());
    socket = dir.resolve("run/thaw.sock");
    try (ServerSocket s = new ServerSocket(0)) {
      nowhere = "127.0.0.1:" + s.getLocalPort();
    }
  }

  @AfterEach
  void stop() {
    servers.forEach(ThawServer::close);
    driver.close();
    store.close();
  }

  ServerOptions options() {
    return new ServerOptions().setPort(0).setAdminToken(ADMIN).setSocketPath(socket)
        .setRegistry(new RegistryOptions().setMaxAttempts(1))
        .addFunction("mlp", new FunctionOptions().setImage("mlp:1"));
  }

  ThawServer start(ServerOptions options) {
    ThawServer s = ThawServer.start(options, store, new InProcessInstances(driver, store));
    servers.add(s);
    return s;
  }

  record Answer(int status, String body, String token) {
    JsonNode json() throws Exception {
      return ServerFixture.JSON.readTree(body);
    }
  }

  /** One request over the socket; {@code headers} are name, value, name, value... */
  static Answer call(Path socket, String method, String path, String body, String... headers) throws Exception {
    List<String[]> h = new ArrayList<>();
    for (int i = 0; i < headers.length; i += 2) {
      h.add(new String[] {headers[i], headers[i + 1]});
    }
    if (body != null) {
      h.add(new String[] {"Content-Type", "application/json"});
    }
    try (NodeClient c = new NodeClient(socket);
        NodeClient.Response r = c.send(new NodeClient.Request(method, path, h,
            body == null ? new byte[0] : body.getBytes(StandardCharsets.UTF_8)))) {
      return new Answer(r.status, ServerFixture.withoutRequestId(r.text()), r.header(FunctionProxy.TOKEN_HEADER));
    }
  }

  Answer register(String name, String key, String options) throws Exception {
    return call(socket, "PUT", "/v1/functions/" + name, options, FunctionProxy.KEY_HEADER, key);
  }

  static JsonNode awaitState(Path socket, String name, String token, Predicate<JsonNode> done) throws Exception {
    JsonNode s = null;
    for (int i = 0; i < 1000; i++) {
      Answer a = call(socket, "GET", "/v1/functions/" + name, null, FunctionProxy.TOKEN_HEADER, token);
      s = a.json();
      if (a.status() == 200 && done.test(s)) {
        return s;
      }
      Thread.sleep(20);
    }
    throw new AssertionError(name + " never reached the expected state: " + s);
  }

  @Test
  void theSocketIsEveryonesServesOnlyTheNodeRoutesAndGoesAtClose() throws Exception {
    ThawServer server = start(options());
    assertEquals(socket, server.socketPath());
    BasicFileAttributes a = Files.readAttributes(socket, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
    assertTrue(a.isOther(), "a socket");
    assertEquals("rw-rw-rw-", PosixFilePermissions.toString(Files.getPosixFilePermissions(socket)));

    assertEquals(200, call(socket, "GET", "/v2/health/live", null).status());
    // The operator's own function is open to every caller, as on TCP.
    Answer invoked = call(socket, "POST", "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST);
    assertEquals(200, invoked.status(), invoked.body());
    assertTrue(invoked.json().has("argmax"), invoked.body());
    // No admin API, no listing, no metrics on the socket, whatever token comes with it.
    assertEquals(404, call(socket, "GET", "/metrics", null, "Authorization", "Bearer " + ADMIN).status());
    assertEquals(404, call(socket, "GET", "/v1/functions", null, "Authorization", "Bearer " + ADMIN).status());
    Answer adminPut = call(socket, "PUT", "/v1/functions/other", "{\"image\": \"mlp:1\"}", "Authorization",
        "Bearer " + ADMIN);
    assertEquals(400, adminPut.status(), adminPut.body());
    assertTrue(adminPut.body().contains(FunctionProxy.KEY_HEADER), adminPut.body());
    assertEquals(400, call(socket, "DELETE", "/v1/functions/mlp", null, "Authorization", "Bearer " + ADMIN).status(),
        "no deleting the operator's function through the socket");
    assertEquals(200, ServerFixture.get(server.port(), "/v1/functions/mlp").statusCode(), "still there");

    server.close();
    assertFalse(Files.exists(socket, LinkOption.NOFOLLOW_LINKS), "the socket file is removed at close");
  }

  @Test
  void aStaleSocketIsReplacedButALiveOneOrAPlainFileIsRefused() throws Exception {
    Files.createDirectories(socket.getParent());
    try (ServerSocketChannel dead = ServerSocketChannel.open(StandardProtocolFamily.UNIX)) {
      dead.bind(UnixDomainSocketAddress.of(socket));
    }
    assertTrue(Files.exists(socket, LinkOption.NOFOLLOW_LINKS), "a socket file nobody listens on");
    ThawServer first = start(options());
    assertEquals(200, call(socket, "GET", "/v2/health/live", null).status());

    UncheckedIOException live = assertThrows(UncheckedIOException.class, () -> start(options().setPort(0)));
    assertTrue(live.getMessage().contains("another server listens on it"), live.getMessage());
    assertEquals(200, call(socket, "GET", "/v2/health/live", null).status(), "the first still serves");
    first.close();

    Files.writeString(socket, "not a socket");
    UncheckedIOException file = assertThrows(UncheckedIOException.class, () -> start(options()));
    assertTrue(file.getMessage().contains("is not a socket"), file.getMessage());
    assertEquals("not a socket", Files.readString(socket), "a file that is not a socket is left alone");
  }

  @Test
  void onTheSocketOnlyThereIsNoTcpPort() throws Exception {
    ThawServer server = start(options().setPort(ServerOptions.NO_PORT));
    assertEquals(ServerOptions.NO_PORT, server.port());
    assertEquals("unix:" + socket, server.url());
    assertEquals(200, call(socket, "POST", "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).status());
    assertEquals("200 404", server.httpWarmup().get(), "the server warms its HTTP path through the socket");
    IllegalArgumentException nowhereToListen = assertThrows(IllegalArgumentException.class,
        () -> ThawServer.start(new ServerOptions().setPort(ServerOptions.NO_PORT), store,
            new InProcessInstances(driver, store)));
    assertTrue(nowhereToListen.getMessage().contains("listen nowhere"), nowhereToListen.getMessage());
  }

  @Test
  void tenantsRegisterRegistryReferencesWithTheirKeyWithinTheNodesLimits() throws Exception {
    start(options().setTenants(new TenantLimits().setMaxFunctionsPerKey(2)));
    String ref = "\"" + nowhere + "/thaw/x:1\"";
    Answer noKey = call(socket, "PUT", "/v1/functions/x", "{\"image\": " + ref + "}");
    assertEquals(400, noKey.status(), noKey.body());
    assertEquals(400, register("x", "short", "{\"image\": " + ref + "}").status());
    Answer tag = register("x", KEY_A, "{\"image\": \"mlp:1\"}");
    assertEquals(403, tag.status(), tag.body());
    assertTrue(tag.body().contains("tag_not_allowed"), tag.body());
    Answer badRef = register("x", KEY_A, "{\"image\": \"nohost/thaw/x:1\"}");
    assertEquals(400, badRef.status(), badRef.body());
    Answer tooMany = register("x", KEY_A, "{\"image\": " + ref + ", \"maxInstances\": 3}");
    assertEquals(403, tooMany.status(), tooMany.body());
    assertTrue(tooMany.body().contains("over_limit") && tooMany.body().contains("maxInstances"), tooMany.body());
    Answer pinned = register("x", KEY_A, "{\"image\": " + ref + ", \"minInstances\": 1}");
    assertEquals(403, pinned.status(), pinned.body());
    Answer operators = register("mlp", KEY_A, "{\"image\": " + ref + "}");
    assertEquals(409, operators.status(), operators.body());
    assertTrue(operators.body().contains("operator"), operators.body());

    assertEquals(202, register("x", KEY_A, "{\"image\": " + ref + "}").status());
    assertEquals(202, register("y", KEY_A, "{\"image\": " + ref + "}").status());
    Answer third = register("z", KEY_A, "{\"image\": " + ref + "}");
    assertEquals(403, third.status(), third.body());
    assertTrue(third.body().contains("maxFunctionsPerKey"), third.body());
    assertEquals(202, register("z", KEY_B, "{\"image\": " + ref + "}").status(), "another key has its own quota");
  }

  @Test
  void aTenantsFunctionHidesFromEveryRequestWithoutItsToken() throws Exception {
    ThawServer server = start(options());
    String body = "{\"image\": \"" + nowhere + "/thaw/x:1\"}";
    Answer registered = register("x", KEY_A, body);
    assertEquals(202, registered.status(), registered.body());
    String token = registered.token();
    assertNotNull(token);
    assertEquals(token, registered.json().get("token").asText());
    assertEquals(registered.json().get("pull").get("reference").asText(), nowhere + "/thaw/x:1");

    Answer taken = register("x", KEY_B, body);
    assertEquals(409, taken.status(), taken.body());
    assertTrue(taken.body().contains("another tenant"), taken.body());

    String notFound = "{\"error\":\"no function named 'x'\",\"code\":\"function_not_found\"}";
    for (String[] r : new String[][] {{"GET", "/v1/functions/x"}, {"GET", "/v1/functions/x/trace"},
        {"POST", "/v1/functions/x/invoke"}, {"GET", "/v2/models/x"}, {"GET", "/v2/models/x/ready"},
        {"POST", "/v2/models/x/infer"}, {"GET", "/v1/functions/%78"}}) {
      String b = r[0].equals("POST") ? "{}" : null;
      assertEquals(new Answer(404, notFound, null), call(socket, r[0], r[1], b), "without a token: " + r[1]);
      assertEquals(new Answer(404, notFound, null), call(socket, r[0], r[1], b, FunctionProxy.TOKEN_HEADER,
          token + "x"), "with another token: " + r[1]);
    }
    // As the completions API answers a model that does not exist.
    Answer completion = call(socket, "POST", "/v1/completions", "{\"model\": \"x\", \"prompt\": \"A\"}");
    Answer none = call(socket, "POST", "/v1/completions", "{\"model\": \"none\", \"prompt\": \"A\"}");
    assertEquals(none.status(), completion.status(), completion.body());
    assertEquals(none.body().replace("'none'", "'x'"), completion.body());

    JsonNode state = awaitState(socket, "x", token, s -> s.path("state").asText().equals("failed"));
    assertEquals(false, state.get("ready").asBoolean());
    assertTrue(state.get("pull").get("error").asText().contains(nowhere), state.toString());
    // The operator sees it (TCP, admin token); without the admin token, not even in the list.
    assertEquals(404, ServerFixture.get(server.port(), "/v1/functions/x").statusCode());
    assertEquals(200, ServerFixture.send(ServerFixture.request(server.port(), "/v1/functions/x")
        .header("Authorization", "Bearer " + ADMIN).GET().build()).statusCode());
    assertFalse(ServerFixture.get(server.port(), "/v1/functions").body().contains("\"x\""));
    assertTrue(ServerFixture.send(ServerFixture.request(server.port(), "/v1/functions")
        .header("Authorization", "Bearer " + ADMIN).GET().build()).body().contains("\"x\""));

    // Another key cannot delete it; its own key can, and the name is free again.
    assertEquals(404, call(socket, "DELETE", "/v1/functions/x", null, FunctionProxy.KEY_HEADER, KEY_B).status());
    assertEquals(200, call(socket, "DELETE", "/v1/functions/x", null, FunctionProxy.KEY_HEADER, KEY_A).status());
    Answer gone = call(socket, "GET", "/v1/functions/x", null, FunctionProxy.TOKEN_HEADER, token);
    assertEquals(404, gone.status(), gone.body());
    assertEquals(202, register("x", KEY_B, body).status(), "the name is free again");
  }

  @Test
  void aFunctionWhoseImageCannotBePulledIsRefusedWith502UntilItIsRegisteredAgain() throws Exception {
    start(options());
    String ref = nowhere + "/thaw/x:1";
    Answer registered = register("x", KEY_A, "{\"image\": \"" + ref + "\"}");
    assertEquals(202, registered.status(), registered.body());
    String token = registered.token();
    JsonNode failed = awaitState(socket, "x", token, s -> s.path("state").asText().equals("failed"));
    assertEquals(ref, failed.get("options").get("image").asText());
    assertEquals(0, failed.get("instances").size());

    Answer invoke = call(socket, "POST", "/v1/functions/x/invoke", ServerFixture.MLP_REQUEST,
        FunctionProxy.TOKEN_HEADER, token);
    assertEquals(502, invoke.status(), invoke.body());
    assertEquals("image_pull_failed", invoke.json().get("code").asText());
    assertTrue(invoke.json().get("error").asText().contains(ref)
        && invoke.json().get("error").asText().contains("register the function again"), invoke.body());
    Answer ready = call(socket, "GET", "/v2/models/x/ready", null, FunctionProxy.TOKEN_HEADER, token);
    assertEquals(502, ready.status(), ready.body());

    // Registering again retries the pull (and fails again, the registry still being absent), with the same token.
    Answer again = register("x", KEY_A, "{\"image\": \"" + ref + "\"}");
    assertEquals(202, again.status(), again.body());
    assertEquals(token, again.token());
  }

  @Test
  void theOptionsJsonFormCarriesTheSocketThePullsAndTheTenantLimits() throws Exception {
    ServerOptions o = ServerOptions.fromJson(ServerFixture.JSON.readTree("{\"socket\": \"/run/t.sock\", \"port\": -1, "
        + "\"maxPulls\": 3, \"tenants\": {\"maxInstances\": 4, \"maxKeepAlive\": \"10m\", \"functions\": [\"a.B\"]}}"));
    assertEquals(Path.of("/run/t.sock"), o.socketPath());
    assertEquals(ServerOptions.NO_PORT, o.port());
    assertEquals(3, o.maxPulls());
    assertEquals(4, o.tenants().maxInstances());
    assertEquals(600, o.tenants().maxKeepAlive().toSeconds());
    assertEquals(Set.of("a.B"), o.tenants().functions());
    assertEquals(TenantLimits.DEFAULT_MAX_FUNCTIONS, o.tenants().maxFunctions(), "absent fields keep their defaults");
    assertEquals(o.toJson(), ServerOptions.fromJson(o.toJson()).toJson(), "the JSON form reads back as it was");
    IllegalArgumentException typo = assertThrows(IllegalArgumentException.class, () -> ServerOptions.fromJson(
        ServerFixture.JSON.readTree("{\"tenants\": {\"maxInstance\": 4}}")));
    assertTrue(typo.getMessage().startsWith("tenants: unknown field 'maxInstance'"), typo.getMessage());
  }
}
