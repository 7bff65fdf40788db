package dev.thaw.cli;

import dev.thaw.image.archive.ImageArchive;
import dev.thaw.image.store.RocksChunkStore;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;

/** {@code thaw export TAG FILE}. */
@Command(name = "export",
    header = "Write an image (manifest and every chunk) to one archive file.",
    description = {"'thaw import' reads it into another store.", ""})
final class ExportCommand implements Callable<Integer> {

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  StoreOption store;

  @Parameters(index = "0", paramLabel = "TAG", converter = TagParameters.Tag.class, description = "The image's tag.")
  String tag;

  @Parameters(index = "1", paramLabel = "FILE", description = "The archive to write.")
  Path file;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() {
    try (RocksChunkStore s = store.open(cli, StoreAccess.READ)) {
      long bytes = ImageArchive.export(s, tag, file);
      spec.commandLine().getOut().printf("exported %s to %s (%s)%n", tag, file, Format.bytes(bytes));
      spec.commandLine().getOut().flush();
      return ThawCli.EXIT_OK;
    }
  }
}
