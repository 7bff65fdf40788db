package dev.thaw.cli;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.registry.ImagePull;
import dev.thaw.image.registry.ImagePuller;
import dev.thaw.image.registry.RegistryReference;
import dev.thaw.image.store.ChunkStore;
import java.io.PrintWriter;
import java.util.Locale;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;

/** {@code thaw pull REF [TAG]}. */
@Command(name = "pull",
    header = "Pull an image from an OCI registry into the store.",
    description = {
        "Blobs come in the image's first-access order, each verified against its digest; the tag is committed only "
            + "when every chunk is in. A registry that stops sending fails the pull (after retries) and commits "
            + "nothing.",
        ""})
final class PullCommand implements Callable<Integer> {

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  StoreOption store;

  @Mixin
  RegistryOption registry;

  @Parameters(index = "0", paramLabel = "REF", description = "HOST[:PORT]/REPOSITORY[:TAG|@sha256:DIGEST].")
  String ref;

  @Parameters(index = "1", arity = "0..1", paramLabel = "TAG", converter = TagParameters.Tag.class,
      description = "The local tag. Default: the repository's last part and the tag, e.g. gpt2:large.")
  String tag;

  @Option(names = "--json", description = "Print the result as JSON.")
  boolean json;

  @Option(names = "--progress", negatable = true, description = "Show progress on stderr (default: when the "
      + "console is a terminal and the output is not --json).")
  Boolean progress;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() {
    RegistryReference source = RegistryOption.parse(ref, spec);
    String local;
    try {
      local = tag != null ? tag : source.defaultLocalTag();
    } catch (IllegalArgumentException e) {
      throw new ParameterException(spec.commandLine(), e.getMessage(), e);
    }
    PrintWriter out = spec.commandLine().getOut();
    // Like build, pull brings an image into a store, and may start one where there is none.
    try (ChunkStore s = store.open(cli, StoreAccess.CREATE)) {
      ImagePull.Result r = new ImagePuller(registry.options(cli, source, spec)).pull(source, s, local,
          ConsoleProgress.choose(progress, json));
      if (json) {
        ObjectNode n = Json.MAPPER.valueToTree(r);
        n.put("manifestDigest", r.manifestDigest().toString());
        out.println(Json.write(n));
      } else {
        out.printf(Locale.ROOT, "pulled %s@%s as %s%n", source, r.manifestDigest(), local);
        out.printf(Locale.ROOT, "  %d blobs (%s): %d fetched, %s received; %s in %.2f s (%.2f GB/s of image)%n",
            r.blobs(), r.layout(), r.fetched(), Format.bytes(r.bytesDownloaded()), Format.bytes(r.imageBytes()),
            r.seconds(), r.imageBytes() / 1e9 / Math.max(r.seconds(), 1e-9));
      }
      out.flush();
      return ThawCli.EXIT_OK;
    }
  }
}
