package dev.thaw.cli;

import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.store.ChunkStore;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;

/** {@code thaw rm TAG}. */
@Command(name = "rm",
    header = "Remove an image's tag and manifest.",
    description = {"Its chunks stay in the store until 'thaw gc'.", ""})
final class RmCommand implements Callable<Integer> {

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  StoreOption store;

  @Parameters(index = "0", paramLabel = "TAG", converter = TagParameters.Tag.class, description = "The image's tag.")
  String tag;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() {
    try (ChunkStore s = store.open(cli, StoreAccess.WRITE)) {
      if (!s.delete(tag)) {
        throw new ImageNotFoundException(tag);
      }
      spec.commandLine().getOut().printf("removed  %s%n", tag);
      spec.commandLine().getOut().flush();
      return ThawCli.EXIT_OK;
    }
  }
}
