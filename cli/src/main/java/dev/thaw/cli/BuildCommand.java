package dev.thaw.cli;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.BuildResult;
import dev.thaw.image.build.GroupImageBuilder;
import dev.thaw.image.build.ImageBuildException;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.function.FunctionLoader;
import dev.thaw.runtime.function.GroupFunction;
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
        "With --devices, the function is a tensor-parallel group (a GroupFunction): every rank is recorded on its "
            + "device at once and committed as one image per rank, tagged TAG-rank0, TAG-rank1, ...; serve the group "
            + "by TAG.",
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

  @Option(names = "--devices", paramLabel = "D0,D1,...", split = ",",
      description = "Build a tensor-parallel group: rank r on device Dr (two or more, distinct).")
  List<Integer> devices = new ArrayList<>();

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
    if (!devices.isEmpty()) {
      return buildGroup(options, out);
    }
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

  /**
   * A group: the function records every rank on its device ({@link GroupFunction#record}), the sample requests run
   * through the recording with every rank's launches profiled, and every rank is committed at once
   * ({@link GroupImageBuilder#buildProfiled}), rank 0 last.
   */
  private int buildGroup(BuildOptions options, PrintWriter out) {
    int[] ranks = devices.stream().mapToInt(Integer::intValue).toArray();
    if (ranks.length < 2 || devices.stream().distinct().count() != ranks.length
        || devices.stream().anyMatch(d -> d < 0)) {
      throw new ParameterException(spec.commandLine(), "--devices names two devices or more, each once, not "
          + devices);
    }
    if (!(FunctionLoader.load(function) instanceof GroupFunction<?> group)) {
      throw new ParameterException(spec.commandLine(), "--devices builds a tensor-parallel group, and " + function
          + " is not a GroupFunction");
    }
    try (GpuDriver driver = cli.openDriver(device.choice, spec); ChunkStore s = store.open(cli, StoreAccess.CREATE)) {
      if (ranks.length > driver.devices().size() || devices.stream().anyMatch(d -> d >= driver.devices().size())) {
        throw new ParameterException(spec.commandLine(), "--devices " + devices + ": this node has "
            + driver.devices().size() + " device(s)");
      }
      GroupFunction.Recording recording;
      try {
        recording = group.record(driver, ranks, options.config());
      } catch (Exception e) {
        throw new ImageBuildException("init", "recording " + function + " over devices " + devices + " failed: "
            + (e.getMessage() == null ? e.getClass().getSimpleName() : e.getMessage()), e);
      }
      GroupImageBuilder.Result r;
      try (recording) {
        r = new GroupImageBuilder(s, ThawCli.chunker()).build(tag, function, recording, ranks.length,
            options.sampleRequests(), new BuildOptions(), ConsoleProgress.forOutput(json));
      }
      if (json) {
        ObjectNode node = Json.MAPPER.createObjectNode();
        node.put("tag", tag);
        node.put("simulated", driver.isSimulated());
        node.put("totalBytes", r.totalBytes());
        ArrayNode each = node.putArray("ranks");
        for (int i = 0; i < ranks.length; i++) {
          each.addObject().put("tag", r.group().rankTags().get(i)).put("device", ranks[i])
              .put("totalBytes", r.ranks().get(i).manifest().totalBytes()).put("newBytes", r.ranks().get(i).newBytes());
        }
        node.put("millis", r.millis());
        out.println(Json.write(node));
      } else {
        out.printf("built    %s, a group of %d ranks on devices %s%n", tag, ranks.length, devices);
        if (driver.isSimulated()) {
          out.println(CheckCommand.SIMULATED_NOTE);
        }
        for (int i = 0; i < ranks.length; i++) {
          BuildResult b = r.ranks().get(i);
          out.printf("rank %d   %s on device %d: %s in %d allocations; %s new in the store%n", i,
              r.group().rankTags().get(i), ranks[i], Format.bytes(b.manifest().totalBytes()),
              b.manifest().allocations().size(), Format.bytes(b.newBytes()));
        }
        out.printf("total    %s, %s%n", Format.bytes(r.totalBytes()), Format.millis(r.millis()));
      }
      out.flush();
      return ThawCli.EXIT_OK;
    }
  }
}
