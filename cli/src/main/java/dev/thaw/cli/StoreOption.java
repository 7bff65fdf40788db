package dev.thaw.cli;

import dev.thaw.image.store.RocksChunkStore;
import java.nio.file.Path;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/** {@code --store PATH}, shared by the commands that use the image store. Null when not given. */
final class StoreOption {

  static final String ENV = "THAW_STORE";

  @Spec(Spec.Target.MIXEE)
  CommandSpec spec;

  @Option(names = "--store", paramLabel = "PATH",
      description = "Image store directory. Default: THAW_STORE, else ~/.thaw/store.")
  String path;

  /**
   * The option, else {@code THAW_STORE}, else {@code ~/.thaw/store}.
   *
   * @throws ParameterException if {@code --store} is empty (it would name the working directory)
   */
  Path resolve(ThawCli cli) {
    if (path != null) {
      if (path.isBlank()) {
        throw new ParameterException(spec.commandLine(), "--store is empty: it must name the store's directory");
      }
      return Path.of(path);
    }
    String env = cli.env(ENV);
    if (env != null && !env.isBlank()) {
      return Path.of(env);
    }
    return Path.of(System.getProperty("user.home"), ".thaw", "store");
  }

  /** Opens the store this option names. */
  RocksChunkStore open(ThawCli cli, StoreAccess access) {
    return cli.openStore(resolve(cli), access);
  }
}
