package dev.thaw.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.BuildResult;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.restore.RestoreCheck;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.server.FunctionOptions;
import dev.thaw.server.ServerOptions;
import dev.thaw.server.ThawServer;
import dev.thaw.server.impl.InProcessInstances;
import java.io.PrintWriter;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;

/**
 * {@code thaw demo}: the whole cycle on an example function, with the defaults: build an image of the MLP
 * example into the store (profiling it with a sample request), serve it from a restore server started in this
 * process, invoke it cold and then warm over HTTP, check both responses against the build's, and print what
 * each step cost: the build's phases and each invoke's {@code Server-Timing}.
 */
@Command(name = "demo",
    header = "Build, serve and invoke an example function: Thaw in one command.",
    description = {
        "Builds an image of the example MLP function into the store, serves it from a restore server in this process "
            + "and invokes it cold and warm over HTTP, checking each response against the build's. Uses the GPU when "
            + "there is one, else the simulated device.",
        ""})
final class DemoCommand implements Callable<Integer> {

  static final String FUNCTION = "dev.thaw.examples.mlp.MlpFunction";
  /** The function's name on the demo's server. */
  static final String NAME = "mlp";
  static final int INPUTS = 64;
  /** The demo's request, written into the store's folder for the closing hint's curl to send. */
  static final String REQUEST_FILE = "demo-request.json";

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  DeviceOption device;

  @Mixin
  StoreOption store;

  @Option(names = "--tag", defaultValue = "demo:mlp", paramLabel = "TAG", converter = TagParameters.Tag.class,
      description = "The image's tag (default: ${DEFAULT-VALUE}); an image with it is replaced.")
  String tag;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() throws Exception {
    PrintWriter out = spec.commandLine().getOut();
    JsonNode request = request();
    BuildOptions options = new BuildOptions().setFunctionClass(FUNCTION).setTag(tag)
        .setConfig(Json.MAPPER.readTree("{\"layers\": [" + INPUTS + ", 256, 256, 10], \"seed\": 42}"))
        .addSampleRequest(request);
    try (GpuDriver driver = cli.openDriver(device.choice, spec); ChunkStore s = store.open(cli, StoreAccess.CREATE)) {
      out.printf("device   %s (%s)%n", driver.devices().get(0).describe(), driver.name());
      if (driver.isSimulated()) {
        out.println(CheckCommand.SIMULATED_NOTE);
      }
      BuildResult built;
      try (GpuContext ctx = driver.createContext(0)) {
        built = new ImageBuilder(s, ThawCli.chunker()).build(options, ctx, ConsoleProgress.forOutput(false));
      }
      // The server restores it into contexts of its own, as a cold start does.
      ImageManifest m = built.manifest();
      out.printf(Locale.ROOT, "%n1. built %s: %s in %d allocations, %d chunks, %s new in the store (%s)%n", tag,
          Format.bytes(m.totalBytes()), m.allocations().size(), m.build().chunkCount(), Format.bytes(built.newBytes()),
          Format.millis(built.timings().totalMillis()));
      out.print(Format.phases(built.timings().phases()));
      out.printf("   profile: %s; restore order %s%n", m.profile().summary(), m.profile().firstAccessOrder());

      ServerOptions serverOptions = new ServerOptions().setPort(0)
          .addFunction(NAME, new FunctionOptions().setImage(tag));
      try (ThawServer server = ThawServer.start(serverOptions, s, new InProcessInstances(driver, s))) {
        out.printf("%n2. serving it as '%s' at %s (instances: %s)%n", NAME, server.url(), server.instances());
        JsonNode built0 = RestoreCheck.buildResponse(m, request).orElse(null);
        boolean same = true;
        for (String expected : new String[] {"cold", "warm"}) {
          HttpResponse<String> r = invoke(server, request);
          if (r.statusCode() != 200) {
            out.printf("   POST /v1/functions/%s/invoke -> %d: %s%n", NAME, r.statusCode(), r.body());
            out.flush();
            return ThawCli.EXIT_FAILED;
          }
          JsonNode response = Json.MAPPER.readTree(r.body());
          String start = r.headers().firstValue("Thaw-Start").orElse("?");
          boolean matches = built0 != null && RestoreCheck.sameJson(built0, response);
          same &= matches && start.equals(expected);
          out.printf(Locale.ROOT, "%n%d. %s invoke over HTTP: argmax %s (Thaw-Start: %s)%n", expected.equals("cold") ? 3 : 4,
              expected, response.get("argmax"), start);
          out.print(serverTiming(r.headers().firstValue("Server-Timing").orElse("")));
        }
        out.printf("%n   responses %s the build's%n", same ? "identical to" : "DIFFER from");
        Path requestFile = store.resolve(cli).resolve(REQUEST_FILE);
        Files.writeString(requestFile, Json.MAPPER.writeValueAsString(request));
        out.printf("%nnext, serve it and invoke it yourself (the server in the foreground, curl in another terminal):%n"
            + "  thaw serve --function %s=%s%s%n"
            + "  curl -s localhost:8080/v1/functions/%s/invoke -H 'Content-Type: application/json' -d @%s%n", NAME, tag,
            store.path != null ? " --store " + store.resolve(cli) : "", NAME, requestFile);
        out.flush();
        return same ? ThawCli.EXIT_OK : ThawCli.EXIT_FAILED;
      }
    }
  }

  private static HttpResponse<String> invoke(ThawServer server, JsonNode request) throws Exception {
    HttpRequest r = HttpRequest.newBuilder(URI.create(server.url() + "/v1/functions/" + NAME + "/invoke"))
        .timeout(Duration.ofMinutes(5)).header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(Json.MAPPER.writeValueAsString(request))).build();
    return HttpClient.newHttpClient().send(r, HttpResponse.BodyHandlers.ofString());
  }

  /** {@code queue;dur=0.012, invoke;dur=1.3} as one phase a line, the way the other steps print theirs. */
  static String serverTiming(String header) {
    Map<String, Double> phases = new LinkedHashMap<>();
    for (String part : header.split(",")) {
      String[] kv = part.trim().split(";dur=");
      if (kv.length == 2) {
        phases.put(kv[0], Double.parseDouble(kv[1]));
      }
    }
    return Format.phases(phases);
  }

  /** Two seeded rows of inputs for the demo MLP. */
  static JsonNode request() {
    Random r = new Random(7);
    ObjectNode body = Json.MAPPER.createObjectNode();
    ArrayNode rows = body.putArray("inputs");
    for (int i = 0; i < 2; i++) {
      ArrayNode row = rows.addArray();
      for (int j = 0; j < INPUTS; j++) {
        row.add(Math.round((r.nextFloat() * 2 - 1) * 1000) / 1000.0);
      }
    }
    return body;
  }
}
