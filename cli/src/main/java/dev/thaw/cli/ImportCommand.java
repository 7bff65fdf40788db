package dev.thaw.cli;

import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.archive.ImageArchive;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;

/** {@code thaw import FILE}. */
@Command(name = "import",
    header = "Read an archive written by 'thaw export' into the store.",
    description = {"Every chunk is verified against its digest before the image's tag is committed.", ""})
final class ImportCommand implements Callable<Integer> {

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  StoreOption store;

  @Parameters(index = "0", paramLabel = "FILE", description = "The archive to read.")
  Path file;

  @Option(names = "--init", description = "Create the store if there is none (only 'thaw build' creates one otherwise).")
  boolean init;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() {
    if (!Files.isRegularFile(file)) {
      throw new ParameterException(spec.commandLine(), "cannot import " + file + ": "
          + (Files.exists(file) ? "it is not a regular file" : "no such file"));
    }
    try (ChunkStore s = store.open(cli, init ? StoreAccess.CREATE : StoreAccess.WRITE)) {
      String tag = ImageArchive.importArchive(s, file).tag();
      spec.commandLine().getOut().printf("imported %s from %s%n", tag, file);
      spec.commandLine().getOut().flush();
      return ThawCli.EXIT_OK;
    }
  }
}
