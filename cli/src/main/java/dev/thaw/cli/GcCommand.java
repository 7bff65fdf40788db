package dev.thaw.cli;

import dev.thaw.image.store.ChunkStore;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;

/** {@code thaw gc}. */
@Command(name = "gc",
    header = "Delete the chunks no image names and what killed builds left.",
    description = {"Prints the chunks freed and the disk space given back: a build killed before it made its chunks "
        + "durable leaves bytes in the store that no chunk accounts for.", ""})
final class GcCommand implements Callable<Integer> {

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  StoreOption store;

  @Option(names = "--json", description = "Print JSON, for scripts.")
  boolean json;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() {
    try (ChunkStore s = store.open(cli, StoreAccess.WRITE)) {
      ChunkStore.GarbageCollection gc = s.collectGarbage();
      if (json) {
        spec.commandLine().getOut().println(Json.write(Json.tree(gc)));
      } else {
        // On disk: a killed build's packs hold bytes no chunk accounts for; rewritten packs give back their dead part.
        spec.commandLine().getOut().printf("freed    %d chunks (%s), %s on disk%n", gc.chunks(),
            Format.bytes(gc.bytes()), Format.bytes(gc.diskBytes()));
      }
      spec.commandLine().getOut().flush();
      return ThawCli.EXIT_OK;
    }
  }
}
