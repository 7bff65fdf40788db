package dev.thaw.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.BuildResult;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.restore.ImageRestorer;
import dev.thaw.image.restore.RestoreCheck;
import dev.thaw.image.restore.RestoredFunction;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import java.io.PrintWriter;
import java.util.Locale;
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
 * example into the store (profiling it with a sample request), restore it into a fresh context, check the
 * restored device memory and response against the image, and print what each step cost.
 */
@Command(name = "demo",
    description = {
        "Build an image of the example MLP function into the store, restore it into a",
        "fresh context, check it against the image and invoke it: Thaw's cycle in one",
        "command. Uses the GPU when there is one, else the simulated device.",
        ""})
final class DemoCommand implements Callable<Integer> {

  static final String FUNCTION = "dev.thaw.examples.mlp.MlpFunction";
  static final int INPUTS = 64;

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  DeviceOption device;

  @Mixin
  StoreOption store;

  @Option(names = "--tag", defaultValue = "demo:mlp", paramLabel = "TAG",
      description = "The image's tag (default: ${DEFAULT-VALUE}); an image with it is replaced.")
  String tag;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() throws Exception {
    PrintWriter out = spec.commandLine().getOut();
    JsonNode request = request();
    BuildOptions options = new BuildOptions().functionClass(FUNCTION).tag(tag)
        .config(Json.MAPPER.readTree("{\"layers\": [" + INPUTS + ", 256, 256, 10], \"seed\": 42}"))
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
      ImageManifest m = built.manifest();
      out.printf(Locale.ROOT, "%n1. built %s: %s in %d allocations, %d chunks, %s new in the store (%s)%n", tag,
          Format.bytes(m.totalBytes()), m.allocations().size(), m.build().chunkCount(), Format.bytes(built.newBytes()),
          Format.millis(built.timings().totalMillis()));
      out.print(Format.phases(built.timings().phases()));
      out.printf("   profile: %s; restore order %s%n", m.profile().summary(), m.profile().firstAccessOrder());

      try (GpuContext fresh = driver.createContext(0);
          RestoredFunction<?> f = new ImageRestorer(s).restore(tag, fresh, ConsoleProgress.forOutput(false))) {
        out.printf(Locale.ROOT, "%n2. restored into a fresh context in %s (init did not run)%n",
            Format.millis(f.timings().totalMillis()));
        out.print(Format.phases(f.timings().phases()));
        RestoreCheck.Result memory = RestoreCheck.deviceMemory(f);
        long t = System.nanoTime();
        FunctionResponse response = f.invoke(FunctionRequest.of(request));
        double invokeMs = (System.nanoTime() - t) / 1e6;
        boolean same = RestoreCheck.buildResponse(m, request).map(r -> RestoreCheck.sameJson(r, response.json()))
            .orElse(false);
        out.printf(Locale.ROOT, "%n3. invoked in %s: argmax %s%n", Format.millis(invokeMs), response.json().get("argmax"));
        out.printf("   device memory %s the image (%d chunks); response %s the build's%n",
            memory.identical() ? "byte-identical to" : "DIFFERS from", memory.chunks(), same ? "identical to" : "DIFFERS from");
        out.printf("%nnext: thaw images | thaw inspect %s | thaw run %s --request FILE --check%n", tag, tag);
        out.flush();
        return memory.identical() && same ? ThawCli.EXIT_OK : ThawCli.EXIT_FAILED;
      }
    }
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
