package dev.thaw.cli;

import java.nio.file.Path;
import picocli.CommandLine.Option;

/** {@code --store PATH}, shared by the commands that use the image store. Null when not given. */
final class StoreOption {

  static final String ENV = "THAW_STORE";

  @Option(names = "--store", paramLabel = "PATH",
      description = "Image store directory. Default: THAW_STORE, else ~/.thaw/store.")
  Path path;

  /** The option, else {@code THAW_STORE}, else {@code ~/.thaw/store}. */
  Path resolve(ThawCli cli) {
    if (path != null) {
      return path;
    }
    String env = cli.env(ENV);
    if (env != null && !env.isBlank()) {
      return Path.of(env);
    }
    return Path.of(System.getProperty("user.home"), ".thaw", "store");
  }
}
