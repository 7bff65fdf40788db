package dev.thaw.cli;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.registry.ImagePusher;
import dev.thaw.image.registry.RegistryOptions;
import dev.thaw.image.registry.RegistryReference;
import dev.thaw.image.store.ChunkStore;
import java.io.PrintWriter;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;

/** {@code thaw push TAG REF}. */
@Command(name = "push",
    header = "Push an image to an OCI registry.",
    description = {
        "Its chunks go as blobs (grouped into packs when one blob each would make the manifest pass 4 MiB), its "
            + "manifest as the config. Blobs the registry has are skipped; --mount-from links them from another "
            + "repository instead of uploading.",
        ""})
final class PushCommand implements Callable<Integer> {

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  StoreOption store;

  @Mixin
  RegistryOption registry;

  @Parameters(index = "0", paramLabel = "TAG", converter = TagParameters.Tag.class,
      description = "The image's local tag.")
  String tag;

  @Parameters(index = "1", paramLabel = "REF", description = "Where to: HOST[:PORT]/REPOSITORY[:TAG].")
  String ref;

  @Option(names = "--mount-from", paramLabel = "REPOSITORY",
      description = "A repository of the same registry to mount blobs from (repeatable).")
  List<String> mountFrom = List.of();

  @Option(names = "--layout", paramLabel = "auto|chunks|packs", description = "Blob per chunk (chunks), packs of "
      + "chunks (packs), or chunks unless the manifest would pass 4 MiB (auto, the default).")
  String layout = "auto";

  @Option(names = "--json", description = "Print the result as JSON.")
  boolean json;

  @Option(names = "--progress", negatable = true, description = "Show progress on stderr (default: when the "
      + "console is a terminal and the output is not --json).")
  Boolean progress;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() {
    RegistryReference target = RegistryOption.parse(ref, spec);
    RegistryOptions o = registry.options(cli, target, spec);
    mountFrom.forEach(o::addMountFrom);
    try {
      o.setBlobLayout(RegistryOptions.BlobLayout.valueOf(layout.toUpperCase(Locale.ROOT)));
    } catch (IllegalArgumentException e) {
      throw new picocli.CommandLine.ParameterException(spec.commandLine(),
          "--layout must be auto, chunks or packs, not '" + layout + "'");
    }
    PrintWriter out = spec.commandLine().getOut();
    // Push only reads: read-only, so it works while a build holds the store.
    try (ChunkStore s = store.open(cli, StoreAccess.READ)) {
      ImagePusher.Result r = new ImagePusher(o).push(s, tag, target, ConsoleProgress.choose(progress, json));
      if (json) {
        ObjectNode n = Json.MAPPER.valueToTree(r);
        n.put("manifestDigest", r.manifestDigest().toString());
        out.println(Json.write(n));
      } else {
        out.printf(Locale.ROOT, "pushed %s to %s@%s%n", tag, target, r.manifestDigest());
        out.printf(Locale.ROOT, "  %d blobs (%s): %d uploaded (%s sent), %d already there, %d mounted%n", r.blobs(),
            r.layout(), r.uploaded(), Format.bytes(r.bytesUploaded()), r.existing(), r.mounted());
        out.printf(Locale.ROOT, "  %s in %.2f s (%.2f GB/s of image)%n", Format.bytes(r.imageBytes()), r.seconds(),
            r.imageBytes() / 1e9 / Math.max(r.seconds(), 1e-9));
      }
      out.flush();
      return ThawCli.EXIT_OK;
    }
  }
}
