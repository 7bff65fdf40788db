package dev.thaw.cli;

import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.InvalidManifestException;
import dev.thaw.image.build.Chunker;
import dev.thaw.image.registry.RegistryException;
import dev.thaw.image.build.FastCdcChunker;
import dev.thaw.image.archive.ArchiveException;
import dev.thaw.image.store.RocksNative;
import dev.thaw.image.store.StoreException;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.image.build.ImageBuildException;
import dev.thaw.image.restore.CorruptChunkException;
import dev.thaw.image.restore.ImageRestoreException;
import dev.thaw.image.store.ChunkNotFoundException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.runtime.gpu.GpuUnavailableException;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Callable;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * The {@code thaw} command line. A thin shell: each subcommand opens a driver, calls a library and prints.
 *
 * <p>Exit codes are part of the interface, for scripts: {@link #EXIT_OK}, {@link #EXIT_CHECK_FAILED},
 * {@link #EXIT_USAGE}, {@link #EXIT_NO_DEVICE}. Errors are one line on stderr, never a stack trace.
 */
@Command(
    name = "thaw",
    mixinStandardHelpOptions = true,
    versionProvider = ThawCli.Version.class,
    subcommands = {DemoCommand.class, ServeCommand.class, DevicesCommand.class, CheckCommand.class, BuildCommand.class, ImagesCommand.class,
        InspectCommand.class, RunCommand.class, VerifyCommand.class, RmCommand.class, GcCommand.class,
        ExportCommand.class, ImportCommand.class, PushCommand.class, PullCommand.class, ProxyCommand.class,
        CommandLine.HelpCommand.class},
    synopsisSubcommandLabel = "COMMAND",
    description = {
        "Thaw makes serverless GPU inference functions start in milliseconds: their expensive start-up runs once, "
            + "when a checkpoint image is built, and is restored on demand at invoke time.",
        "",
        "Without a GPU, Thaw uses a simulated device so that everything still runs; its timings are never GPU "
            + "timings.",
        ""},
    commandListHeading = "Commands:%n",
    exitCodeListHeading = "%nExit codes:%n",
    exitCodeList = {
        "0:success",
        "1:failed: a check, build, restore or verify failed; the store is missing, damaged, read-only or in use;"
            + " an archive is bad or cannot be written; a registry refused, failed or timed out; any other error",
        "2:usage error: an unknown option or a bad value, a malformed tag or registry reference, a bad or missing"
            + " config, request or archive file, a request the function rejects, a bad THAW_DEVICE",
        "3:no usable device: cuda forced without a usable GPU, a driver that cannot be opened, or no such device",
        "4:no such image: no image has that tag in the store, or the registry has no such repository or tag"},
    footerHeading = "%nEnvironment:%n",
    footer = {
        "  THAW_DEVICE         cuda, sim or auto (the default: a GPU when one is",
        "                      usable, else the simulated device); --device overrides it",
        "  THAW_STORE          the image store's folder (default ~/.thaw/store);",
        "                      --store overrides it",
        "  THAW_SIM_MEMORY     memory of the simulated device, e.g. 16g (the default)",
        "  THAW_SIM_COPY_GBPS  simulated host<->device copy bandwidth in GB/s;",
        "                      0 (the default) copies as fast as the host can",
        "  THAW_SIM_DEVICES    how many simulated devices there are (default 1)",
        "  THAW_SIM_PEER_GBPS  simulated bandwidth between two devices in GB/s;",
        "                      0 (the default) copies as fast as the host can",
        "  THAW_SIM_PEER_ACCESS  0: the simulated devices cannot reach each",
        "                      other's memory (default 1: they are peers)",
        "  THAW_JAVA_OPTS      extra JVM options for the launchers, e.g. -Xmx8g",
        "  THAW_REGISTRY_AUTH  registry logins in Docker's config.json format (default:",
        "                      $DOCKER_CONFIG/config.json, else ~/.docker/config.json)",
        "  THAW_ADMIN_TOKEN    serve: the admin API's bearer token (default: the file",
        "                      admin-token in the store, made at first start)",
        "  PORT                serve: the port when --port is not given",
        "  K_SERVICE, K_REVISION, K_CONFIGURATION",
        "                      serve under Knative: labels on every log line and",
        "                      metric; K_SERVICE also opens the store read-only",
        "  THAW_FUNCTION_KEY   proxy: the tenant key its function is registered with",
        "                      on the node server (node mode)",
        "  THAW_PRELAUNCH      serve: 0 starts the pool's first worker after the",
        "                      options are parsed instead of before",
        "",
        "Examples:",
        "  thaw devices                  list the devices Thaw would use",
        "  thaw check --device sim       prove the simulated device works (no GPU needed)",
        "  thaw check --device cuda      insist on a GPU: exit 3 if there is none",
        "  thaw demo                     build, serve and invoke an example function",
        "  thaw build --function dev.thaw.examples.mlp.MlpFunction \\",
        "      --config '{\"layers\": [2, 16, 3]}' --tag mlp:1",
        "                                build an image of the example MLP",
        "  echo '{\"inputs\": [[0.1, 0.2]]}' > request.json",
        "  thaw run mlp:1 --request request.json",
        "                                restore it and invoke it once",
        "  thaw serve --function mlp=mlp:1",
        "                                serve it at localhost:8080 (thaw serve --help)",
        "  thaw help build               the options of one command"})
public final class ThawCli implements Callable<Integer> {

  public static final int EXIT_OK = 0;
  public static final int EXIT_CHECK_FAILED = 1;
  public static final int EXIT_USAGE = 2;
  public static final int EXIT_NO_DEVICE = 3;
  public static final int EXIT_NOT_FOUND = 4;
  /** Any failure that is not a usage, device or missing-image error; same code as a failed check. */
  public static final int EXIT_FAILED = 1;

  /** When this class was loaded: {@code main} is about to run ({@code thaw serve}'s startup timeline). */
  static final long MAIN_NANOS = System.nanoTime();

  /** How a command gets its driver: {@link GpuDrivers#open(DeviceChoice, Map)}, or a stand-in in tests. */
  @FunctionalInterface
  interface DriverOpener {
    GpuDriver open(DeviceChoice choice, Map<String, String> environment);
  }

  @Spec
  CommandSpec spec;

  private final Map<String, String> environment;
  private final DriverOpener opener;

  public ThawCli() {
    this(System.getenv(), GpuDrivers::open);
  }

  ThawCli(Map<String, String> environment, DriverOpener opener) {
    this.environment = Map.copyOf(environment);
    this.opener = opener;
  }

  /**
   * The one place the CLI's store is opened: RocksDB at {@code directory}, read-only for the commands that only
   * read (they work while a build holds the store), and created only for {@link StoreAccess#CREATE}.
   */
  RocksChunkStore openStore(Path directory, StoreAccess access) {
    return RocksChunkStore.open(new StoreOptions().setPath(directory).setReadOnly(access == StoreAccess.READ)
        .setCreate(access == StoreAccess.CREATE));
  }

  /** Opens an existing store for writing. */
  ChunkStore openStore(Path directory) {
    return openStore(directory, StoreAccess.WRITE);
  }

  /** The chunker builds use: the one place it is chosen. */
  static Chunker chunker() {
    return new FastCdcChunker();
  }

  String env(String name) {
    return environment.get(name);
  }

  public static void main(String[] args) {
    // The CLI speaks for itself (including "SIMULATED device"); library INFO logs would only repeat it on stderr.
    if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
      System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
    }
    if (args.length > 0 && args[0].equals("proxy")) {
      System.exit(proxy(Arrays.copyOfRange(args, 1, args.length)));
    }
    if (servesOnTheGpu(args, System.getenv(DeviceChoice.ENV))) {
      // cuInit costs a quarter second and needs nothing the command line says: it runs while picocli parses.
      GpuDrivers.openAhead(DeviceChoice.AUTO);
    }
    if (args.length > 0 && args[0].equals("serve")) {
      // The store opens after the options are parsed; its native library can load while they are.
      RocksNative.loadAhead();
    }
    // THAW_PRELAUNCH=0: the pool starts its first worker itself, after option parsing (to measure what this saves).
    String pooledDevice = "0".equals(System.getenv("THAW_PRELAUNCH")) ? null
        : servesFromThePool(args, System.getenv(DeviceChoice.ENV));
    if (pooledDevice != null) {
      // The pool's first worker JVM starts (and runs its cuInit) while picocli parses (docs/design/server.md).
      try {
        ContextPool.prelaunch(new ContextPoolOptions().setDeviceChoice(pooledDevice));
      } catch (IOException | RuntimeException e) {
        // The pool spawns its first worker itself, as without a prelaunch.
      }
    }
    System.exit(commandLine(new ThawCli()).execute(args));
  }

  /**
   * {@code thaw proxy}: a function pod's start is its reason to be. Its own parser takes the plain options, without
   * picocli; anything else (help, a mistake) goes to picocli with this one command, not the whole tree.
   */
  private static int proxy(String[] args) {
    Map<String, String> env = System.getenv();
    ProxyCommand fast = ProxyCommand.parseFast(env, args);
    if (fast != null) {
      PrintWriter out = new PrintWriter(System.out, true);
      PrintWriter err = new PrintWriter(System.err, true);
      try {
        Integer exit = fast.runFast(out, err);
        if (exit != null) {
          return exit;
        }
      } catch (Exception e) {
        // What picocli's execution handler says of it: one line (the port is taken, say).
        err.println("thaw: " + describe(e));
        return EXIT_FAILED;
      }
    }
    CommandLine proxy = new CommandLine(new ProxyCommand(env));
    proxy.setCommandName("thaw proxy");
    proxy.setParameterExceptionHandler(ThawCli::usageError);
    proxy.setExecutionExceptionHandler(ThawCli::executionError);
    return proxy.execute(args);
  }

  /**
   * For {@code thaw serve} with pool-backed instances (the default; not {@code --instances in-process}, nor help):
   * the device choice its pool's workers get, as {@code thaw serve} names it ({@code --device}, else
   * {@code THAW_DEVICE}, lower case); null otherwise, or when the choice does not parse (the command says why).
   */
  static String servesFromThePool(String[] args, String deviceEnv) {
    if (args.length == 0 || !args[0].equals("serve")) {
      return null;
    }
    String device = deviceEnv;
    for (int i = 1; i < args.length; i++) {
      String a = args[i];
      if (a.equals("-h") || a.equals("--help")) {
        return null;
      }
      String instances = a.equals("--instances") && i + 1 < args.length ? args[i + 1]
          : a.startsWith("--instances=") ? a.substring("--instances=".length()) : null;
      if (instances != null && !instances.equals("pool")) {
        return null;
      }
      if (a.equals("--device") && i + 1 < args.length) {
        device = args[i + 1];
      } else if (a.startsWith("--device=")) {
        device = a.substring("--device=".length());
      }
    }
    try {
      return DeviceChoice.parse(device).name().toLowerCase(Locale.ROOT);
    } catch (IllegalArgumentException e) {
      return null;
    }
  }

  /**
   * True for {@code thaw serve} that may open CUDA (not {@code --device sim}, nor {@code THAW_DEVICE=sim}, nor
   * help): {@link CudaDriver#availability()} (which runs {@code cuInit}) can start before the options are parsed.
   */
  static boolean servesOnTheGpu(String[] args, String deviceEnv) {
    if (args.length == 0 || !args[0].equals("serve")) {
      return false;
    }
    String device = deviceEnv;
    for (int i = 1; i < args.length; i++) {
      if (args[i].equals("-h") || args[i].equals("--help")) {
        return false;
      }
      if (args[i].equals("--device") && i + 1 < args.length) {
        device = args[i + 1];
      } else if (args[i].startsWith("--device=")) {
        device = args[i].substring("--device=".length());
      }
    }
    return device == null || !device.strip().equalsIgnoreCase("sim");
  }

  /** The configured command line: its error handlers turn exceptions into one stderr line and an exit code. */
  static CommandLine commandLine(ThawCli cli) {
    CommandLine cmd = new CommandLine(cli);
    cmd.setParameterExceptionHandler(ThawCli::usageError);
    cmd.setExecutionExceptionHandler(ThawCli::executionError);
    return cmd;
  }

  @Override
  public Integer call() {
    throw new ParameterException(spec.commandLine(), "no command given; try 'thaw devices', 'thaw check' or 'thaw images'");
  }

  /**
   * Opens the driver {@code override} names, else the one {@code THAW_DEVICE} names, else picks one.
   *
   * @throws ParameterException if {@code THAW_DEVICE} or a simulated-device variable is malformed
   * @throws NoDeviceException if the driver cannot be opened
   */
  GpuDriver openDriver(DeviceChoice override, CommandSpec caller) {
    DeviceChoice choice;
    try {
      choice = override != null ? override : DeviceChoice.parse(environment.get(DeviceChoice.ENV));
      // A malformed THAW_SIM_* is a usage error whichever driver opens.
      SimOptions.fromEnvironment();
    } catch (IllegalArgumentException e) {
      throw new ParameterException(caller.commandLine(), e.getMessage(), e);
    }
    if (choice == DeviceChoice.CUDA) {
      // Checked here, not left to GpuDrivers, so the message names what forced cuda: the option or the variable.
      DriverAvailability cuda = CudaDriver.availability();
      if (!cuda.available()) {
        String forcedBy = override != null ? "--device cuda" : DeviceChoice.ENV + "=cuda";
        throw new NoDeviceException(forcedBy + " but no GPU is usable: " + cuda.unavailabilityCause());
      }
    }
    try {
      return opener.open(choice, System.getenv());
    } catch (GpuUnavailableException | CudaException e) {
      throw new NoDeviceException(e.getMessage());
    } catch (RuntimeException | LinkageError e) {
      // A driver that cannot even start (a missing native library, a placeholder build) is no usable device.
      throw new NoDeviceException("cannot open " + name(choice) + ": " + describe(e));
    }
  }

  private static String name(DeviceChoice choice) {
    return choice == DeviceChoice.AUTO ? "a device driver" : "the " + choice.name().toLowerCase(Locale.ROOT) + " driver";
  }

  static String describe(Throwable e) {
    return e.getMessage() == null || e.getMessage().isBlank()
        ? e.getClass().getSimpleName()
        : e.getMessage();
  }

  /** {@code 13.0} for 13000. */
  static String cudaVersion(int driverVersion) {
    return (driverVersion / 1000) + "." + (driverVersion % 1000) / 10;
  }

  private static int usageError(ParameterException e, String[] args) {
    CommandLine cmd = e.getCommandLine();
    PrintWriter err = cmd.getErr();
    err.println("thaw: " + e.getMessage());
    CommandLine.UnmatchedArgumentException.printSuggestions(e, err);
    err.println("Try '" + cmd.getCommandSpec().qualifiedName() + " --help' for more information.");
    err.flush();
    return EXIT_USAGE;
  }

  private static int executionError(Exception e, CommandLine cmd, CommandLine.ParseResult parsed) {
    PrintWriter err = cmd.getErr();
    if (e instanceof NoDeviceException || e instanceof GpuUnavailableException || e instanceof CudaException) {
      err.println("thaw: " + describe(e));
      err.flush();
      return EXIT_NO_DEVICE;
    }
    if (e instanceof ImageNotFoundException || e.getCause() instanceof ImageNotFoundException
        || e instanceof RegistryException r && isUnknownManifest(r)) {
      err.println("thaw: " + describe(e));
      err.flush();
      return EXIT_NOT_FOUND;
    }
    if (e instanceof InvalidRequestException) {
      err.println("thaw: bad request: " + describe(e));
      err.flush();
      return EXIT_USAGE;
    }
    if (e instanceof ImageBuildException || e instanceof ImageRestoreException || e instanceof CorruptChunkException
        || e instanceof ChunkNotFoundException || e instanceof InvalidManifestException
        || e instanceof StoreException || e instanceof ArchiveException || e instanceof UncheckedIOException
        || e instanceof RegistryException) {
      err.println("thaw: " + describe(e));
      err.flush();
      return EXIT_FAILED;
    }
    // Unforeseen: still one line; the class name only when there is no message to show.
    err.println("thaw: error: " + describe(e));
    err.flush();
    return EXIT_FAILED;
  }

  /** The registry has no such repository or tag: no such image there (a missing blob is damage, not this). */
  private static boolean isUnknownManifest(RegistryException e) {
    return e.status() == 404 && ("MANIFEST_UNKNOWN".equals(e.code()) || "NAME_UNKNOWN".equals(e.code()));
  }

  /** No device can be used: the driver would not open, or the device asked for does not exist. */
  static final class NoDeviceException extends RuntimeException {
    NoDeviceException(String message) {
      super(message, null, false, false);
    }
  }

  /** {@code thaw 0.1.0} from the jar's Maven metadata, and the Java it runs on. */
  static final class Version implements CommandLine.IVersionProvider {
    private static final String POM_PROPERTIES = "/META-INF/maven/dev.thaw/thaw-image-builder/pom.properties";

    @Override
    public String[] getVersion() {
      String version = "(development build)";
      try (InputStream in = ThawCli.class.getResourceAsStream(POM_PROPERTIES)) {
        if (in != null) {
          Properties p = new Properties();
          p.load(in);
          version = p.getProperty("version", version);
        }
      } catch (IOException e) {
        // The version line is informative only; keep the placeholder.
      }
      return new String[] {
          "thaw " + version,
          "Java " + System.getProperty("java.version") + " (" + System.getProperty("java.vm.name") + ")"};
    }
  }
}
