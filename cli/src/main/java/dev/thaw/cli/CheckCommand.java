package dev.thaw.cli;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.check.DeviceCheck;
import dev.thaw.runtime.check.DeviceCheckOptions;
import dev.thaw.runtime.check.DeviceCheckResult;
import dev.thaw.runtime.gpu.GpuDriver;
import java.io.PrintWriter;
import java.util.Locale;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;

/** {@code thaw check}: {@link DeviceCheck} on one device, as a table or JSON. */
@Command(name = "check", sortOptions = false,
    header = "Prove that a device works end to end, and time each step.",
    description = {
        "Through Thaw's driver layer it creates a context, JIT-compiles the bundled check kernels (PTX) and loads the "
            + "resulting cubin again, allocates device memory, copies seeded random data to it, runs saxpy and a fill, "
            + "copies back and verifies every element exactly, then times many empty kernel launches.",
        "",
        "Prints PASS (exit 0), or FAIL with the phase and the reason (exit 1).",
        ""})
final class CheckCommand implements Callable<Integer> {

  static final String SIMULATED_NOTE = "SIMULATED device: timings are not GPU timings";

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  DeviceOption device;

  @Option(names = "--ordinal", paramLabel = "N", defaultValue = "0",
      description = "Device to check, by ordinal as 'thaw devices' lists them (default: ${DEFAULT-VALUE}).")
  int ordinal;

  @Option(names = "--elements", paramLabel = "N", defaultValue = "" + DeviceCheckOptions.DEFAULT_ELEMENTS,
      description = "Floats in each saxpy buffer; 4 bytes each (default: ${DEFAULT-VALUE}, 64 MiB).")
  int elements;

  @Option(names = "--launches", paramLabel = "N", defaultValue = "" + DeviceCheckOptions.DEFAULT_EMPTY_LAUNCHES,
      description = "Empty kernel launches to time (default: ${DEFAULT-VALUE}).")
  int launches;

  @Option(names = "--seed", paramLabel = "N", defaultValue = "" + DeviceCheckOptions.DEFAULT_SEED,
      description = "Seed of the random inputs; a failure is reproducible with it (default: ${DEFAULT-VALUE}).")
  long seed;

  @Option(names = "--json", description = "Print the result as JSON instead of a table, for scripts.")
  boolean json;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() {
    DeviceCheckOptions options;
    try {
      options = new DeviceCheckOptions().setDeviceOrdinal(ordinal).setElements(elements).setEmptyLaunches(launches)
          .setSeed(seed);
    } catch (IllegalArgumentException e) {
      throw new ParameterException(spec.commandLine(), e.getMessage(), e);
    }
    PrintWriter out = spec.commandLine().getOut();
    try (GpuDriver driver = cli.openDriver(device.choice, spec)) {
      int visible = driver.devices().size();
      if (ordinal >= visible) {
        throw new ThawCli.NoDeviceException(String.format(Locale.ROOT, "no device %d: the %s driver sees %d",
            ordinal, driver.name(), visible));
      }
      DeviceCheckResult result = DeviceCheck.run(driver, options);
      if (json) {
        ObjectNode node = Json.tree(result);
        if (result.simulated()) {
          node.put("note", SIMULATED_NOTE);
        }
        out.println(Json.write(node));
      } else {
        printTable(out, result);
      }
      out.flush();
      return result.passed() ? ThawCli.EXIT_OK : ThawCli.EXIT_CHECK_FAILED;
    }
  }

  private static void printTable(PrintWriter out, DeviceCheckResult r) {
    out.printf("device   %s%n", r.device().isEmpty() ? "(not reached)" : r.device());
    out.printf("driver   %s, CUDA %s%n", r.driver(), ThawCli.cudaVersion(r.driverVersion()));
    if (r.simulated()) {
      out.println(SIMULATED_NOTE);
    }
    out.println();
    int width = "phase".length();
    for (DeviceCheckResult.Phase p : r.phases()) {
      width = Math.max(width, p.name().length());
    }
    String row = "  %-" + width + "s  %11s  %s";
    out.println(String.format(Locale.ROOT, row, "phase", "time", "result"));
    for (DeviceCheckResult.Phase p : r.phases()) {
      String time = String.format(Locale.ROOT, "%.3f ms", p.millis());
      out.println(String.format(Locale.ROOT, row, p.name(), time, p.detail()).stripTrailing());
    }
    out.println();
    if (r.passed()) {
      out.printf(Locale.ROOT, "PASS  JIT %s, cubin load %s, H2D %s, D2H %s, empty launch %s%n",
          figure(r.jitMillis(), "%.1f ms"), figure(r.cubinLoadMillis(), "%.2f ms"),
          figure(r.hostToDeviceGBps(), "%.1f GB/s"), figure(r.deviceToHostGBps(), "%.1f GB/s"),
          figure(r.emptyLaunchMicros(), "%.2f us"));
    } else {
      out.println("FAIL  " + r.failure());
    }
  }

  private static String figure(double value, String format) {
    return Double.isNaN(value) ? "n/a" : String.format(Locale.ROOT, format, value);
  }
}
