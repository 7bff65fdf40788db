package dev.thaw.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.runtime.gpu.GpuUnavailableException;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Nested;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

/**
 * Pins the {@code thaw} command line: its help, exit codes, one-line errors, how the driver is chosen, and the
 * output of {@code devices} and {@code check}. {@link OnTheSimulatedDevice} runs the real commands end to end.
 */
class ThawCliTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  private static final DeviceInfo H200 =
      new DeviceInfo(0, "NVIDIA H200", 9, 0, 143771L << 20, "GPU-0a1b2c3d-0000-1111-2222-333344445555", 132);
  private static final DeviceInfo H100 =
      new DeviceInfo(1, "NVIDIA H100 80GB HBM3", 9, 0, 81559L << 20, "GPU-99999999-0000-1111-2222-333344445555", 132);

  /** What one run printed and returned. */
  record Run(int exit, String out, String err) {}

  static Run run(ThawCli cli, String... args) {
    StringWriter out = new StringWriter();
    StringWriter err = new StringWriter();
    CommandLine cmd = ThawCli.commandLine(cli);
    cmd.setOut(new PrintWriter(out, true));
    cmd.setErr(new PrintWriter(err, true));
    int exit = cmd.execute(args);
    return new Run(exit, out.toString(), err.toString());
  }

  static Run run(String... args) {
    return run(new ThawCli(Map.of(), GpuDrivers::open), args);
  }

  /** An error is one line on stderr, starting "thaw: ", with no stack trace. */
  static void assertOneLineError(Run r, String expected) {
    String[] lines = r.err().strip().split("\n");
    assertTrue(lines[0].startsWith("thaw: "), r.err());
    assertTrue(lines[0].contains(expected), r.err());
    assertFalse(r.err().contains("\tat ") || r.err().contains("Exception"), r.err());
  }

  @Test
  void helpExplainsTheCommandsTheExitCodesAndTheEnvironment() {
    Run r = run("--help");
    assertEquals(0, r.exit());
    assertTrue(r.out().startsWith("Usage: thaw "), r.out());
    for (String s : List.of("devices", "check", "Exit codes:", "THAW_DEVICE", "--device sim", "simulated device",
        "no usable device")) {
      assertTrue(r.out().contains(s), "help lacks '" + s + "':\n" + r.out());
    }
    assertEquals("", r.err());
  }

  @Test
  void checkHelpDescribesEveryOption() {
    Run r = run("help", "check");
    assertEquals(0, r.exit());
    for (String s : List.of("--device=cuda|sim|auto", "--elements", "--launches", "--seed", "--ordinal", "--json",
        "PASS", "FAIL")) {
      assertTrue(r.out().contains(s), "check help lacks '" + s + "':\n" + r.out());
    }
  }

  @Test
  void versionNamesThawAndTheJava() {
    Run r = run("--version");
    assertEquals(0, r.exit());
    assertTrue(r.out().startsWith("thaw "), r.out());
    assertTrue(r.out().contains("Java 17") || r.out().contains("Java "), r.out());
  }

  @Test
  void noCommandIsAUsageError() {
    Run r = run();
    assertEquals(ThawCli.EXIT_USAGE, r.exit());
    assertOneLineError(r, "no command given");
    assertTrue(r.err().contains("Try 'thaw --help'"), r.err());
  }

  @Test
  void anUnknownOptionIsAUsageError() {
    Run r = run("devices", "--bogus");
    assertEquals(ThawCli.EXIT_USAGE, r.exit());
    assertOneLineError(r, "Unknown option: '--bogus'");
    assertEquals("", r.out());
  }

  @Test
  void anUnknownDeviceIsAUsageErrorThatNamesTheChoices() {
    Run r = run("check", "--device", "nope");
    assertEquals(ThawCli.EXIT_USAGE, r.exit());
    assertOneLineError(r, "'nope' is not a device; use cuda, sim or auto");
    assertTrue(r.err().contains("Try 'thaw check --help'"), r.err());
  }

  @Test
  void aMalformedThawDeviceIsAUsageError() {
    Recording opener = new Recording(fakeDriver(false, List.of(H200)));
    Run r = run(new ThawCli(Map.of("THAW_DEVICE", "tpu"), opener), "devices");
    assertEquals(ThawCli.EXIT_USAGE, r.exit());
    assertOneLineError(r, "THAW_DEVICE=tpu");
    assertTrue(opener.choices.isEmpty(), "no driver is opened on a usage error");
  }

  @Test
  void outOfRangeCheckSizesAreUsageErrors() {
    assertEquals(ThawCli.EXIT_USAGE, run("check", "--elements", "0").exit());
    assertEquals(ThawCli.EXIT_USAGE, run("check", "--launches", "-1").exit());
    assertEquals(ThawCli.EXIT_USAGE, run("check", "--elements", "many").exit());
  }

  @Test
  void theDeviceOptionOverridesThawDevice() {
    Recording opener = new Recording(fakeDriver(true, List.of(H200)));
    assertEquals(0, run(new ThawCli(Map.of("THAW_DEVICE", "cuda"), opener), "devices", "--device", "sim").exit());
    assertEquals(List.of(DeviceChoice.SIM), opener.choices);
  }

  @Test
  void thawDeviceChoosesWhenTheOptionIsAbsent() {
    Recording opener = new Recording(fakeDriver(true, List.of(H200)));
    assertEquals(0, run(new ThawCli(Map.of("THAW_DEVICE", "sim"), opener), "devices").exit());
    assertEquals(0, run(new ThawCli(Map.of(), opener), "devices").exit());
    assertEquals(List.of(DeviceChoice.SIM, DeviceChoice.AUTO), opener.choices);
  }

  @Test
  void forcingCudaWithoutAGpuExitsThreeWithOneLine() {
    assumeFalse(CudaDriver.availability().available(), "this host has a usable GPU");
    Run r = run("check", "--device", "cuda");
    assertEquals(ThawCli.EXIT_NO_DEVICE, r.exit());
    assertOneLineError(r, "--device cuda but no GPU is usable: ");
    assertEquals(1, r.err().strip().split("\n").length, r.err());

    Run viaEnv = run(new ThawCli(Map.of("THAW_DEVICE", "cuda"), GpuDrivers::open), "devices");
    assertEquals(ThawCli.EXIT_NO_DEVICE, viaEnv.exit());
    assertOneLineError(viaEnv, "THAW_DEVICE=cuda but no GPU is usable: ");
  }

  @Test
  void aDriverThatCannotOpenExitsThree() {
    ThawCli unavailable = new ThawCli(Map.of(), (choice, sim) -> {
      throw new GpuUnavailableException("no GPU is usable: libcuda.so.1 not found");
    });
    Run r = run(unavailable, "devices");
    assertEquals(ThawCli.EXIT_NO_DEVICE, r.exit());
    assertOneLineError(r, "libcuda.so.1 not found");

    ThawCli failing = new ThawCli(Map.of(), (choice, sim) -> {
      throw CudaException.of("cuInit", 100, "CUDA_ERROR_NO_DEVICE", null);
    });
    Run c = run(failing, "check", "--json");
    assertEquals(ThawCli.EXIT_NO_DEVICE, c.exit());
    assertOneLineError(c, "cuInit failed: CUDA_ERROR_NO_DEVICE (100)");
    assertEquals("", c.out());
  }

  @Test
  void devicesPrintsTheDriverItsVersionAndEveryDevice() {
    FakeDriver driver = fakeDriver(false, List.of(H200, H100));
    Run r = run(new ThawCli(Map.of(), new Recording(driver)), "devices");
    assertEquals(0, r.exit(), r.err());
    assertTrue(r.out().contains("driver   cuda\n"), r.out());
    assertTrue(r.out().contains("CUDA 13.0 (13000)"), r.out());
    assertTrue(r.out().contains("  0  " + H200.describe() + "\n"), r.out());
    assertTrue(r.out().contains("  1  " + H100.describe() + "\n"), r.out());
    assertFalse(r.out().contains("SIMULATED"), "a GPU is not labelled simulated:\n" + r.out());
    assertEquals(1, driver.closes, "the driver is closed once");
  }

  @Test
  void devicesJsonIsParseableAndComplete() throws Exception {
    Run r = run(new ThawCli(Map.of(), new Recording(fakeDriver(true, List.of(H200)))), "devices", "--json");
    assertEquals(0, r.exit(), r.err());
    JsonNode root = JSON.readTree(r.out());
    assertTrue(root.get("simulated").asBoolean());
    assertEquals(13000, root.get("driverVersion").asInt());
    assertEquals("13.0", root.get("cudaVersion").asText());
    JsonNode d = root.get("devices").get(0);
    assertEquals("NVIDIA H200", d.get("name").asText());
    assertEquals("sm_90", d.get("smArch").asText());
    assertEquals(143771L << 20, d.get("totalMemoryBytes").asLong());
    assertEquals(H200.describe(), d.get("description").asText());
  }

  @Test
  void devicesWithNoDeviceExitsThree() {
    Run r = run(new ThawCli(Map.of(), new Recording(fakeDriver(false, List.of()))), "devices");
    assertEquals(ThawCli.EXIT_NO_DEVICE, r.exit());
    assertTrue(r.out().contains("devices  0"), r.out());
    assertOneLineError(r, "sees no device");
  }

  @Test
  void checkOfADeviceThatDoesNotExistExitsThree() {
    Run r = run(new ThawCli(Map.of(), new Recording(fakeDriver(false, List.of(H200)))), "check", "--ordinal", "1");
    assertEquals(ThawCli.EXIT_NO_DEVICE, r.exit());
    assertOneLineError(r, "no device 1: the cuda driver sees 1");
  }

  @Test
  void aCheckThatFailsNamesThePhaseAndTheErrorAndExitsOne() {
    FakeDriver driver = fakeDriver(false, List.of(H200));
    Run r = run(new ThawCli(Map.of(), new Recording(driver)), "check");
    assertEquals(ThawCli.EXIT_CHECK_FAILED, r.exit());
    assertTrue(r.out().contains("device   (not reached)"), r.out());
    assertTrue(r.out().contains("FAIL  create context: cuCtxCreate failed: CUDA_ERROR_OUT_OF_MEMORY (2)"), r.out());
    assertFalse(r.out().contains("PASS"), r.out());
    assertEquals("", r.err());
    assertEquals(1, driver.closes);
  }

  @Test
  void aFailedCheckInJsonHasNullsForWhatItDidNotMeasure() throws Exception {
    Run r = run(new ThawCli(Map.of(), new Recording(fakeDriver(false, List.of(H200)))), "check", "--json");
    assertEquals(ThawCli.EXIT_CHECK_FAILED, r.exit());
    JsonNode root = JSON.readTree(r.out());
    assertFalse(root.get("passed").asBoolean());
    assertEquals("cuda", root.get("driver").asText());
    assertTrue(root.get("failure").asText().startsWith("create context: cuCtxCreate failed"), r.out());
    assertTrue(root.get("emptyLaunchMicros").isNull(), r.out());
    assertTrue(root.get("hostToDeviceGBps").isNull(), r.out());
    assertEquals(0, root.get("phases").size());
    assertFalse(root.has("note"), "only a simulated device gets the note");
  }

  /** The real commands on the real simulated device: they pass once the sim driver is in the build. */
  @Nested
  class OnTheSimulatedDevice {

    @Test
    void devicesSaysTheDeviceIsSimulated() {
      Run r = run("devices", "--device", "sim");
      assertEquals(0, r.exit(), r.err());
      assertTrue(r.out().contains("driver   sim\n"), r.out());
      assertTrue(r.out().contains(CheckCommand.SIMULATED_NOTE), r.out());
      assertTrue(r.out().contains("  0  "), r.out());
    }

    @Test
    void checkPassesAndReportsEveryPhase() {
      Run r = run("check", "--device", "sim", "--elements", "100000", "--launches", "2000");
      assertEquals(0, r.exit(), r.out() + r.err());
      assertTrue(r.out().contains(CheckCommand.SIMULATED_NOTE), r.out());
      for (String phase : List.of("create context", "load PTX (JIT)", "load cubin", "copy host -> device", "saxpy",
          "copy device -> host", "verify saxpy", "fill_u32", "empty launch x 2,000", "release")) {
        assertTrue(r.out().contains("  " + phase), "no phase '" + phase + "':\n" + r.out());
      }
      assertTrue(r.out().contains("100,000 elements bit-exact"), r.out());
      assertTrue(r.out().matches("(?s).*\\d+\\.\\d\\d us/launch.*"), r.out());
      assertTrue(r.out().contains("\nPASS  JIT "), r.out());
    }

    @Test
    void checkJsonCarriesTheFiguresAndTheSimulatedNote() throws Exception {
      Run r = run("check", "--device", "sim", "--elements", "4096", "--launches", "500", "--json");
      assertEquals(0, r.exit(), r.out() + r.err());
      JsonNode root = JSON.readTree(r.out());
      assertTrue(root.get("passed").asBoolean(), r.out());
      assertTrue(root.get("failure").isNull(), r.out());
      assertEquals("sim", root.get("driver").asText());
      assertTrue(root.get("simulated").asBoolean());
      assertEquals(CheckCommand.SIMULATED_NOTE, root.get("note").asText());
      assertTrue(root.get("cubinBytes").asLong() > 0, r.out());
      assertTrue(root.get("emptyLaunchMicros").asDouble() > 0, r.out());
      List<String> phases = new ArrayList<>();
      root.get("phases").forEach(p -> phases.add(p.get("name").asText()));
      assertTrue(phases.contains("verify saxpy") && phases.contains("fill_u32"), phases.toString());
    }
  }

  /** Opens one given driver and records what was asked for. */
  static final class Recording implements ThawCli.DriverOpener {
    final List<DeviceChoice> choices = new ArrayList<>();
    private final GpuDriver driver;

    Recording(GpuDriver driver) {
      this.driver = driver;
    }

    @Override
    public GpuDriver open(DeviceChoice choice, Map<String, String> environment) {
      choices.add(choice);
      return driver;
    }
  }

  static FakeDriver fakeDriver(boolean simulated, List<DeviceInfo> devices) {
    return new FakeDriver(simulated, devices);
  }

  /** Lists devices; creating a context fails the way an exhausted GPU does. */
  static final class FakeDriver implements GpuDriver {
    private final boolean simulated;
    private final List<DeviceInfo> devices;
    int closes;

    FakeDriver(boolean simulated, List<DeviceInfo> devices) {
      this.simulated = simulated;
      this.devices = devices;
    }

    @Override
    public String name() {
      return simulated ? "sim" : "cuda";
    }

    @Override
    public boolean isSimulated() {
      return simulated;
    }

    @Override
    public int driverVersion() {
      return 13000;
    }

    @Override
    public List<DeviceInfo> devices() {
      return devices;
    }

    @Override
    public GpuContext createContext(int deviceOrdinal) {
      throw CudaException.of("cuCtxCreate", CudaError.CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", null);
    }

    @Override
    public void close() {
      closes++;
    }
  }

  /** cuInit starts before option parsing only for a serve that may use CUDA: never for sim, help or another command. */
  @Test
  void cudaIsOpenedAheadOnlyForAServeThatMayUseIt() {
    assertTrue(ThawCli.servesOnTheGpu(new String[] {"serve", "--function", "mlp=mlp:1"}, null));
    assertTrue(ThawCli.servesOnTheGpu(new String[] {"serve", "--device", "cuda"}, "sim"));
    assertFalse(ThawCli.servesOnTheGpu(new String[] {"serve", "--device", "sim"}, null));
    assertFalse(ThawCli.servesOnTheGpu(new String[] {"serve", "--device=sim"}, "cuda"));
    assertFalse(ThawCli.servesOnTheGpu(new String[] {"serve"}, "sim"));
    assertFalse(ThawCli.servesOnTheGpu(new String[] {"serve", "--help"}, null));
    assertFalse(ThawCli.servesOnTheGpu(new String[] {"check"}, null));
    assertFalse(ThawCli.servesOnTheGpu(new String[0], null));
  }

  /**
   * A worker JVM is prelaunched only for a serve with pool-backed instances, with the device choice its pool's workers
   * will get (the pool then takes it: PrelaunchTest).
   */
  @Test
  void aWorkerIsPrelaunchedOnlyForAPooledServeWithItsPoolsDeviceChoice() {
    assertEquals("auto", ThawCli.servesFromThePool(new String[] {"serve", "--function", "mlp=mlp:1"}, null));
    assertEquals("sim", ThawCli.servesFromThePool(new String[] {"serve"}, "sim"));
    assertEquals("cuda", ThawCli.servesFromThePool(new String[] {"serve", "--device", "cuda"}, "sim"));
    assertEquals("sim", ThawCli.servesFromThePool(new String[] {"serve", "--device=SIM", "--instances", "pool"}, null));
    assertNull(ThawCli.servesFromThePool(new String[] {"serve", "--instances", "in-process"}, null));
    assertNull(ThawCli.servesFromThePool(new String[] {"serve", "--instances=in-process"}, null));
    assertNull(ThawCli.servesFromThePool(new String[] {"serve", "--help"}, null));
    assertNull(ThawCli.servesFromThePool(new String[] {"serve", "--device", "tpu"}, null), "the command says why");
    assertNull(ThawCli.servesFromThePool(new String[] {"build"}, null));
    assertNull(ThawCli.servesFromThePool(new String[0], null));
  }
}
