package dev.thaw.cli;

import dev.thaw.image.registry.RegistryCredentials;
import dev.thaw.image.registry.RegistryOptions;
import dev.thaw.image.registry.RegistryReference;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;

/** Options of the commands that talk to an OCI registry: credentials, plain HTTP, parallel transfers. */
final class RegistryOption {

  @Option(names = "--auth-file", paramLabel = "PATH", description = "Registry logins in Docker's config.json format "
      + "(auths). Default: THAW_REGISTRY_AUTH, else $DOCKER_CONFIG/config.json, else ~/.docker/config.json.")
  Path authFile;

  @Option(names = "--plain-http", description = "Speak plain HTTP to the registry (loopback registries always do).")
  boolean plainHttp;

  @Option(names = "--transfers", paramLabel = "N",
      description = "Blobs moved at once. Default: " + RegistryOptions.DEFAULT_TRANSFERS + ".")
  Integer transfers;

  /** The options for a registry reference, credentials read from the file the options or environment name. */
  RegistryOptions options(ThawCli cli, RegistryReference ref, CommandSpec spec) {
    RegistryOptions o = options(cli, spec);
    if (plainHttp) {
      o.addPlainHttp(ref.registry());
    }
    return o;
  }

  /** The options for any registry, credentials read from the file the options or environment name. */
  RegistryOptions options(ThawCli cli, CommandSpec spec) {
    RegistryOptions o = new RegistryOptions();
    try {
      if (authFile != null) {
        o.setCredentials(RegistryCredentials.load(authFile));
      } else {
        Map<String, String> env = new HashMap<>();
        for (String name : new String[] {RegistryCredentials.ENV_AUTH_FILE, "DOCKER_CONFIG"}) {
          if (cli.env(name) != null) {
            env.put(name, cli.env(name));
          }
        }
        o.setCredentials(RegistryCredentials.fromEnvironment(env));
      }
      if (transfers != null) {
        o.setTransfers(transfers);
      }
    } catch (IllegalArgumentException e) {
      throw new ParameterException(spec.commandLine(), e.getMessage(), e);
    }
    return o;
  }

  static RegistryReference parse(String ref, CommandSpec spec) {
    try {
      return RegistryReference.parse(ref);
    } catch (IllegalArgumentException e) {
      throw new ParameterException(spec.commandLine(), e.getMessage(), e);
    }
  }
}
