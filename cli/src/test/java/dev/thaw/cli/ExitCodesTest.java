package dev.thaw.cli;

import static dev.thaw.cli.ThawCliTest.assertOneLineError;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.cli.ThawCliTest.Run;
import dev.thaw.runtime.function.SaxpyFunction;
import dev.thaw.runtime.gpu.GpuDrivers;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins that every command exits as {@code thaw --help} says (2 usage, 4 no such image, 1 any other failure),
 * each error one line that names what is wrong, on the real store.
 */
class ExitCodesTest {

  @TempDir
  Path dir;

  private Path store;
  private ThawCli cli;
  private Path request;

  @BeforeEach
  void setUp() throws Exception {
    store = dir.resolve("store");
    cli = new ThawCli(Map.of("THAW_STORE", store.toString()), GpuDrivers::open);
    request = Files.writeString(dir.resolve("req.json"), "{\"a\": 2.5}");
  }

  private Run thaw(String... args) {
    return ThawCliTest.run(cli, args);
  }

  private static String[] args(Object... parts) {
    List<String> out = new ArrayList<>();
    for (Object p : parts) {
      out.add(p.toString());
    }
    return out.toArray(String[]::new);
  }

  private void expect(int exit, String message, String... args) {
    Run r = thaw(args);
    assertEquals(exit, r.exit(), String.join(" ", args) + "\n" + r.out() + r.err());
    assertOneLineError(r, message);
  }

  private String[] build(Object... extra) {
    List<Object> a = new ArrayList<>(List.of("build", "--device", "sim", "--function", SaxpyFunction.class.getName(),
        "--tag", "saxpy:1"));
    a.addAll(List.of(extra));
    return args(a.toArray());
  }

  /** Every command that names an image, with {@code tag} in its place. */
  private String[][] commandsNaming(String tag) {
    return new String[][] {
        {"inspect", tag},
        {"verify", tag},
        {"rm", tag},
        {"export", tag, dir.resolve("x.tar").toString()},
        {"run", tag, "--device", "sim", "--request", request.toString()},
        {"push", tag, "127.0.0.1:1/thaw/x:1"},
        {"serve", "--function", "f=" + tag, "--instances", "in-process", "--device", "sim", "--port", "0"}};
  }

  @Test
  void aMissingTagIsFourForEveryCommandThatNamesOne() throws Exception {
    assertEquals(0, thaw(build("--config", "{\"n\": 100}")).exit());
    for (String[] command : commandsNaming("nope")) {
      expect(ThawCli.EXIT_NOT_FOUND, "no image tagged 'nope'", command);
    }
  }

  @Test
  void aMalformedTagIsTwoForEveryCommandThatTakesOneAndOpensNothing() throws Exception {
    assertEquals(0, thaw(build("--config", "{\"n\": 100}")).exit());
    String rule = "'Bad_Tag' is not a tag";
    for (String[] command : commandsNaming("Bad_Tag")) {
      expect(ThawCli.EXIT_USAGE, rule, command);
    }
    expect(ThawCli.EXIT_USAGE, rule, "pull", "127.0.0.1:1/thaw/x:1", "Bad_Tag");
    expect(ThawCli.EXIT_USAGE, rule, "demo", "--device", "sim", "--tag", "Bad_Tag");
    Path fresh = dir.resolve("fresh");
    expect(ThawCli.EXIT_USAGE, rule, "build", "--device", "sim", "--function", SaxpyFunction.class.getName(),
        "--config", "{\"n\": 100}", "--tag", "Bad_Tag", "--store", fresh.toString());
    assertTrue(Files.notExists(fresh), "a malformed tag is refused before the store is opened");
  }

  @Test
  void aMissingStoreIsOneForEveryCommandThatReadsIt() throws Exception {
    for (String[] command : commandsNaming("x:1")) {
      if (!command[0].equals("run")) {
        expect(ThawCli.EXIT_FAILED, "store " + store + ": there is no store here", command);
      }
    }
    expect(ThawCli.EXIT_FAILED, "store " + store + ": there is no store here", "run", "x:1", "--device", "sim",
        "--request", request.toString());
    expect(ThawCli.EXIT_FAILED, "store " + store + ": there is no store here", "images");
    expect(ThawCli.EXIT_FAILED, "store " + store + ": there is no store here", "gc");
    assertTrue(Files.notExists(store), "none of them made one");
  }

  @Test
  void anUnknownOptionIsTwoForEveryCommand() {
    assertEquals(ThawCli.EXIT_USAGE, thaw("help", "nosuch").exit());
    for (String command : ThawCli.commandLine(cli).getSubcommands().keySet()) {
      if (command.equals("help")) {
        continue; // picocli's: 'thaw help --x' shows the help
      }
      Run r = thaw(command, "--no-such-option");
      assertEquals(ThawCli.EXIT_USAGE, r.exit(), command + ": " + r.err());
      assertTrue(r.err().startsWith("thaw: "), command + ": " + r.err());
      assertEquals("", r.out(), command);
    }
  }

  @Test
  void badConfigsAreTwoAndNameTheProblem() throws Exception {
    expect(ThawCli.EXIT_USAGE, "config file " + dir.resolve("mlp.json") + " does not exist",
        build("--config", dir.resolve("mlp.json")));
    expect(ThawCli.EXIT_USAGE, "Duplicate field 'n'", build("--config", "{\"n\": 100, \"n\": 200}"));
    expect(ThawCli.EXIT_USAGE, "Trailing token", build("--config", "{\"n\": 100} {\"n\": 200}"));
    Path file = Files.writeString(dir.resolve("c.json"), "{\"n\": 100}\n}");
    expect(ThawCli.EXIT_USAGE, "config file " + file + " is not JSON", build("--config", file));
    Path sample = Files.writeString(dir.resolve("s.json"), "{\"a\": 1, \"a\": 2}");
    expect(ThawCli.EXIT_USAGE, "sample request " + sample + " is not JSON: Duplicate field 'a'",
        build("--config", "{\"n\": 100}", "--sample-request", sample));
    assertTrue(Files.notExists(store), "no store is made for a build that never started");
  }

  @Test
  void badRequestsAreTwoAndAreCaughtBeforeTheRestore() throws Exception {
    assertEquals(0, thaw(build("--config", "{\"n\": 100}")).exit());
    Path dup = Files.writeString(dir.resolve("dup.json"), "{\"a\": 1, \"a\": 2}");
    Path trailing = Files.writeString(dir.resolve("trailing.json"), "{\"a\": 1} x");
    Path notObject = Files.writeString(dir.resolve("array.json"), "[1, 2]");
    for (Path bad : List.of(dup, trailing, notObject, dir.resolve("absent.json"))) {
      Run r = thaw("run", "saxpy:1", "--device", "sim", "--request", bad.toString());
      assertEquals(ThawCli.EXIT_USAGE, r.exit(), bad + ": " + r.err());
      assertOneLineError(r, "request " + bad);
      assertEquals("", r.out(), "nothing restored for a bad request");
    }
    Path rejected = Files.writeString(dir.resolve("rejected.json"), "{\"b\": 1}");
    Run r = thaw("run", "saxpy:1", "--device", "sim", "--request", rejected.toString());
    assertEquals(ThawCli.EXIT_USAGE, r.exit(), r.err());
    assertOneLineError(r, "bad request: the request needs a number 'a'");
    // Checked against the image's host state before any device is opened: with no GPU here, forcing cuda
    // would exit 3 if the restore were tried first.
    Run first = thaw("run", "saxpy:1", "--device", "cuda", "--request", rejected.toString());
    assertEquals(ThawCli.EXIT_USAGE, first.exit(), first.err());
    assertEquals(ThawCli.EXIT_NOT_FOUND, thaw("run", "nope", "--device", "cuda", "--request",
        rejected.toString()).exit(), "a missing image is found before the device is opened");
  }

  @Test
  void storeErrorsAreOneLineNamingThePathAndTheCause() throws Exception {
    Path file = Files.writeString(dir.resolve("a-file"), "x");
    expect(ThawCli.EXIT_FAILED, "store " + file + ": is not a directory but a file", "images", "--store",
        file.toString());
    expect(ThawCli.EXIT_FAILED, "store " + file + ": is not a directory but a file",
        args((Object[]) build("--config", "{\"n\": 100}", "--store", file)));
    expect(ThawCli.EXIT_USAGE, "--store is empty", "images", "--store", "");
    expect(ThawCli.EXIT_USAGE, "--store is empty", "gc", "--store", " ");
    expect(ThawCli.EXIT_FAILED, "store " + store + ": there is no store here", "images");
    expect(ThawCli.EXIT_FAILED, "store " + store + ": there is no store here", "gc");
    expect(ThawCli.EXIT_USAGE, "cannot import " + dir.resolve("none.tar") + ": no such file", "import",
        dir.resolve("none.tar").toString());
    assertTrue(Files.notExists(store), "no command but build and import --init creates a store");
    Path junk = Files.writeString(dir.resolve("junk.tar"), "not an archive");
    expect(ThawCli.EXIT_FAILED, "store " + store + ": there is no store here", "import", junk.toString());
    expect(ThawCli.EXIT_FAILED, "the archive", "import", "--init", junk.toString());
  }

  @Test
  void aReadOnlyStoreReadsAndRefusesWritesInOneLine() throws Exception {
    assertEquals(0, thaw(build("--config", "{\"n\": 100}")).exit());
    try (ReadOnly ro = ReadOnly.make(store)) {
      Assumptions.assumeTrue(ro.works(), ro.why());
      assertEquals(0, thaw("images").exit());
      assertEquals(0, thaw("verify").exit());
      expect(ThawCli.EXIT_FAILED, "store " + store + ": is read-only", "gc");
      expect(ThawCli.EXIT_FAILED, "store " + store + ": is read-only", "rm", "saxpy:1");
      expect(ThawCli.EXIT_FAILED, "store " + store + ": is read-only", build("--config", "{\"n\": 100}"));
    }
    try (ReadOnly ro = ReadOnly.make(dir)) {
      Assumptions.assumeTrue(ro.works(), ro.why());
      expect(ThawCli.EXIT_FAILED, "cannot export to " + dir.resolve("a.tar") + ": cannot write to " + dir,
          "export", "saxpy:1", dir.resolve("a.tar").toString());
    }
  }

  /**
   * A directory made unwritable for this process: by its mode, or as root (whom modes don't stop) by the
   * immutable attribute, where the file system has one.
   */
  record ReadOnly(Path dir, boolean works, String why, boolean immutable) implements AutoCloseable {

    static ReadOnly make(Path dir) throws Exception {
      if (!"root".equals(System.getProperty("user.name"))) {
        Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString("r-xr-xr-x"));
        return new ReadOnly(dir, !Files.isWritable(dir), "chmod did not make " + dir + " read-only", false);
      }
      boolean ok = new ProcessBuilder("chattr", "+i", dir.toString()).redirectErrorStream(true).start().waitFor() == 0;
      return new ReadOnly(dir, ok && !Files.isWritable(dir),
          "running as root, and chattr +i is not available on " + dir + "'s file system", ok);
    }

    @Override
    public void close() throws Exception {
      if (immutable) {
        new ProcessBuilder("chattr", "-i", dir.toString()).start().waitFor();
      } else {
        Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString("rwxr-xr-x"));
      }
    }
  }
}
