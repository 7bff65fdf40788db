package dev.thaw.bench.coldstart;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * How the harness starts {@code thaw}: the distribution's {@code bin/thaw} when it runs from one (the
 * {@code thaw.home} property {@code bin/thaw-bench} sets), else a JVM on the harness's own class path (a
 * development build, the tests). Either way a new process, the way a user starts it.
 *
 * @param prefix the command up to the subcommand
 * @param device {@code THAW_DEVICE} for every child: {@code cuda}, {@code sim} or {@code auto}
 * @param store {@code THAW_STORE} for every child
 */
record ThawCommand(List<String> prefix, String device, Path store) {

  static final String HOME_PROPERTY = "thaw.home";
  private static final String CLI_MAIN = "dev.thaw.cli.ThawCli";

  static ThawCommand locate(String device, Path store) {
    String home = System.getProperty(HOME_PROPERTY);
    if (home != null && Files.isExecutable(Path.of(home, "bin", "thaw"))) {
      return new ThawCommand(List.of(Path.of(home, "bin", "thaw").toString()), device, store);
    }
    // Only tests and development runs get here, never a measurement: the C1 compiler and the serial collector
    // let a short JVM start sooner on a busy two-core machine.
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    return new ThawCommand(List.of(java, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp",
        System.getProperty("java.class.path"), CLI_MAIN), device, store);
  }

  List<String> command(String... args) {
    List<String> c = new ArrayList<>(prefix);
    c.addAll(List.of(args));
    return c;
  }

  Map<String, String> environment() {
    return Map.of("THAW_DEVICE", device, "THAW_STORE", store.toString());
  }

  /** How it is started, for the report. */
  String describe() {
    return prefix.size() == 1 ? prefix.get(0)
        : String.join(" ", prefix.subList(0, prefix.indexOf("-cp"))) + " -cp <class path> " + CLI_MAIN
            + " (a development JVM: not a measurement)";
  }
}
