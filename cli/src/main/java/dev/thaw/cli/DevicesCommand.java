package dev.thaw.cli;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.GpuDriver;
import java.io.PrintWriter;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;

/** {@code thaw devices}: which driver Thaw would use and what it sees. */
@Command(name = "devices",
    header = "Show the driver Thaw would use and the devices it sees.",
    description = {
        "Prints the driver (cuda, or sim for the simulated device), the CUDA version it speaks and one line for each "
            + "visible device. Exits 3 when no driver can be opened or it sees no device.",
        ""})
final class DevicesCommand implements Callable<Integer> {

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  DeviceOption device;

  @Option(names = "--json", description = "Print JSON instead of text, for scripts.")
  boolean json;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() {
    PrintWriter out = spec.commandLine().getOut();
    try (GpuDriver driver = cli.openDriver(device.choice, spec)) {
      List<DeviceInfo> devices = driver.devices();
      if (json) {
        out.println(Json.write(toJson(driver, devices)));
      } else {
        out.printf("driver   %s%n", driver.name());
        if (driver.isSimulated()) {
          out.println(CheckCommand.SIMULATED_NOTE);
        }
        out.printf("version  CUDA %s (%d)%n", ThawCli.cudaVersion(driver.driverVersion()), driver.driverVersion());
        out.printf("devices  %d%n", devices.size());
        for (DeviceInfo d : devices) {
          out.printf("  %d  %s%n", d.ordinal(), d.describe());
        }
      }
      out.flush();
      if (devices.isEmpty()) {
        throw new ThawCli.NoDeviceException("the " + driver.name() + " driver sees no device");
      }
      return ThawCli.EXIT_OK;
    }
  }

  private static ObjectNode toJson(GpuDriver driver, List<DeviceInfo> devices) {
    ObjectNode root = Json.MAPPER.createObjectNode();
    root.put("driver", driver.name());
    root.put("simulated", driver.isSimulated());
    root.put("driverVersion", driver.driverVersion());
    root.put("cudaVersion", ThawCli.cudaVersion(driver.driverVersion()));
    ArrayNode list = root.putArray("devices");
    for (DeviceInfo d : devices) {
      ObjectNode node = Json.tree(d);
      node.put("smArch", d.smArch());
      node.put("description", d.describe());
      list.add(node);
    }
    return root;
  }
}
