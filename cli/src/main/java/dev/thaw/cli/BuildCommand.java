package dev.thaw.cli;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.BuildResult;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;

/** {@code thaw build}: run a function's init once and commit its checkpoint image under a tag. */
@Command(name = "build", sortOptions = false,
    header = "Build a checkpoint image of a function and tag it.",
    description = {
        "Runs the function's init once on the device, runs each sample request as a profiling invocation, snapshots "
            + "every allocation into the store (chunked, hashed, deduplicated) and commits the manifest under the tag. "
            + "A failed build commits nothing. An existing tag is moved to the new image.",
        ""})
final class BuildCommand implements Callable<Integer> {

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  DeviceOption device;

  @Mixin
  StoreOption store;

  @Option(names = "--function", required = true, paramLabel = "CLASS",
      description = "The ThawFunction implementation, by class name (on the class path).")
  String function;

  @Option(names = "--config", paramLabel = "FILE|JSON",
      description = "The function's config: a JSON object, inline or in a file (default: {}).")
  String config;

  @Option(names = "--tag", required = true, paramLabel = "TAG", converter = TagParameters.Tag.class,
      description = "The tag to commit the image under.")
  String tag;

  @Option(names = "--sample-request", paramLabel = "FILE",
      description = "A request (JSON file) to run after init; repeatable.")
  List<Path> sampleRequests = new ArrayList<>();

  @Option(names = "--json", description = "Print the result as JSON, for scripts (no progress bar).")
  boolean json;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() {
    BuildOptions options;
    try {
      options = new BuildOptions().setFunctionClass(function).setTag(tag);
      if (config != null) {
        options.setConfig(config);
      }
      sampleRequests.forEach(options::addSampleRequest);
    } catch (IllegalArgumentException e) {
      throw new ParameterException(spec.commandLine(), e.getMessage(), e);
    }
    PrintWriter out = spec.commandLine().getOut();
    try (GpuDriver driver = cli.openDriver(device.choice, spec); GpuContext ctx = driver.createContext(0);
        ChunkStore s = store.open(cli, StoreAccess.CREATE)) {
      BuildResult r = new ImageBuilder(s, ThawCli.chunker()).build(options, ctx, ConsoleProgress.forOutput(json));
      if (json) {
        ObjectNode node = Json.MAPPER.createObjectNode();
        node.put("tag", r.tag());
        node.put("simulated", driver.isSimulated());
        node.put("totalBytes", r.manifest().totalBytes());
        node.put("uniqueBytes", r.manifest().build().uniqueBytes());
        node.put("newBytes", r.newBytes());
        node.put("chunks", r.manifest().build().chunkCount());
        node.set("timings", Json.tree(r.timings()));
        node.put("snapshotGBps", r.timings().snapshotGBps());
        node.set("sampleResponses", Json.MAPPER.valueToTree(r.sampleResponses().stream().map(x -> x.json()).toList()));
        out.println(Json.write(node));
      } else {
        out.printf("built    %s%n", r.tag());
        if (driver.isSimulated()) {
          out.println(CheckCommand.SIMULATED_NOTE);
        }
        out.printf("memory   %s in %d allocations, %d chunks; %s unique, %s new in the store%n",
            Format.bytes(r.manifest().totalBytes()), r.manifest().allocations().size(),
            r.manifest().build().chunkCount(), Format.bytes(r.manifest().build().uniqueBytes()),
            Format.bytes(r.newBytes()));
        out.print(Format.phases(r.timings().phases()));
        out.printf(Locale.ROOT, "total    %s, snapshot %.2f GB/s%n", Format.millis(r.timings().totalMillis()),
            r.timings().snapshotGBps());
      }
      out.flush();
      return ThawCli.EXIT_OK;
    }
  }
}
