package dev.thaw.cli;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.Images;
import dev.thaw.image.StrictJson;
import dev.thaw.image.registry.ImagePull;
import dev.thaw.image.registry.RegistryReference;
import dev.thaw.image.restore.ImageRestorer;
import dev.thaw.image.restore.RequestValidation;
import dev.thaw.image.restore.RestoreCheck;
import dev.thaw.image.restore.RestoredFunction;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Optional;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;

/** {@code thaw run TAG --request FILE}: a full restore into a fresh context and one invocation. */
@Command(name = "run",
    header = "Restore an image, invoke its function once and print the response.",
    description = {
        "The image is restored into a fresh context, every chunk verified; the response is printed with the time of "
            + "each restore phase. With --check the device memory and the response are compared with the build's "
            + "(the build must have had a --sample-request with the same request).",
        ""})
final class RunCommand implements Callable<Integer> {

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  DeviceOption device;

  @Mixin
  StoreOption store;

  @Mixin
  RegistryOption registry;

  @Parameters(index = "0", paramLabel = "TAG|REF", converter = TagParameters.TagOrReference.class,
      description = "The image's tag, or a registry reference (HOST[:PORT]/REPOSITORY[:TAG]): the restore starts once "
          + "the manifests are pulled, and the image is committed to the store when every chunk has arrived.")
  String tag;

  @Option(names = "--request", required = true, paramLabel = "FILE", description = "The request: a JSON file.")
  Path request;

  @Option(names = "--json", description = "Print the response and timings as one JSON object.")
  boolean json;

  @Option(names = "--check", description = "After the restore, read all device memory back and compare it with the "
      + "image's chunk digests; after the invocation, compare the response with the one the build recorded for the "
      + "same sample request. Exit 1 on any difference.")
  boolean check;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() throws Exception {
    JsonNode body;
    try {
      body = StrictJson.read(Files.readString(request));
    } catch (JsonProcessingException e) {
      throw new ParameterException(spec.commandLine(), "request " + request + " is not JSON: "
          + StrictJson.problem(e), e);
    } catch (NoSuchFileException e) {
      throw new ParameterException(spec.commandLine(), "request " + request + " does not exist", e);
    } catch (IOException e) {
      throw new ParameterException(spec.commandLine(), "cannot read request " + request + ": " + e.getMessage(), e);
    }
    if (body == null || !body.isObject()) {
      throw new ParameterException(spec.commandLine(), "request " + request + " is not a JSON object");
    }
    PrintWriter out = spec.commandLine().getOut();
    long started = System.nanoTime();
    try (ChunkStore s = store.open(cli,
            RegistryReference.looksLikeReference(tag) ? StoreAccess.CREATE : StoreAccess.READ);
        RegistrySource source = RegistrySource.open(cli, s, tag, registry, spec)) {
      // Before any device work: a missing image or a request the function refuses costs no restore.
      RequestValidation.check(source.tag(), Images.manifest(source.store(), source.tag()), FunctionRequest.of(body));
      return restoreAndInvoke(source, body, out, started);
    }
  }

  private int restoreAndInvoke(RegistrySource source, JsonNode body, PrintWriter out, long started)
      throws Exception {
    try (GpuDriver driver = cli.openDriver(device.choice, spec); GpuContext ctx = driver.createContext(0);
        RestoredFunction<?> f = new ImageRestorer(source.store()).restore(source.tag(), ctx,
            ConsoleProgress.forOutput(json))) {
      // Opening the driver and the store and creating the context: what the restore's own phases leave out.
      double setupMillis = (System.nanoTime() - started) / 1e6 - f.timings().totalMillis();
      RestoreCheck.Result memory = check ? RestoreCheck.deviceMemory(f) : null;
      long t = System.nanoTime();
      FunctionResponse response = f.invoke(FunctionRequest.of(body));
      double invokeMs = (System.nanoTime() - t) / 1e6;
      Optional<JsonNode> recorded = check ? RestoreCheck.buildResponse(f.manifest(), body) : Optional.empty();
      ImagePull.Result pulled = source.finish();
      boolean sameResponse = recorded.map(r -> RestoreCheck.sameJson(r, response.json())).orElse(true);
      if (json) {
        ObjectNode node = Json.MAPPER.createObjectNode();
        node.set("response", response.json());
        node.put("setupMillis", setupMillis);
        node.set("restore", Json.tree(f.timings()));
        node.put("invokeMillis", invokeMs);
        node.put("simulated", driver.isSimulated());
        node.set("notes", Json.MAPPER.valueToTree(f.notes()));
        if (pulled != null) {
          ObjectNode pull = Json.MAPPER.valueToTree(pulled);
          node.set("pull", pull.put("manifestDigest", pulled.manifestDigest().toString()));
        }
        if (check) {
          node.set("check", Json.MAPPER.valueToTree(memory));
          if (recorded.isPresent()) {
            node.put("responseMatchesBuild", sameResponse);
          } else {
            node.putNull("responseMatchesBuild");
          }
        }
        out.println(Json.write(node));
      } else {
        out.println(Json.write(response.json()));
        if (driver.isSimulated()) {
          out.println(CheckCommand.SIMULATED_NOTE);
        }
        f.notes().forEach(n -> out.println("note: " + n));
        out.print(Format.phases(f.timings().phases()));
        out.printf(Locale.ROOT, "  %-15s  %12s%n", "invoke", Format.millis(invokeMs));
        out.printf(Locale.ROOT, "restored %s in %s (%.2f GB/s copy + verify)%n", Format.bytes(f.timings().bytes()),
            Format.millis(f.timings().totalMillis()), f.timings().copyGBps());
        if (pulled != null) {
          out.printf(Locale.ROOT, "pulled lazily from %s: %d blobs fetched, committed as %s after %.3f s%n",
              pulled.reference(), pulled.fetched(), pulled.tag(), pulled.seconds());
        }
        if (check) {
          out.printf(Locale.ROOT, "check: device memory %s: %d chunks, %s%n",
              memory.identical() ? "byte-identical to the image" : "DIFFERS from the image", memory.chunks(),
              Format.bytes(memory.bytes()));
          memory.mismatches().stream().limit(10).forEach(m -> out.println("  " + m));
          out.println("check: response " + (recorded.isEmpty() ? "not compared (the build ran no such sample request)"
              : sameResponse ? "identical to the build's" : "DIFFERS from the build's: " + recorded.get()));
        }
      }
      out.flush();
      return check && !(memory.identical() && sameResponse) ? ThawCli.EXIT_FAILED : ThawCli.EXIT_OK;
    }
  }
}
