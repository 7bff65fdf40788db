package dev.thaw.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.FileTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.jar.JarEntry;
import java.util.jar.JarOutputStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The distribution's launchers (distribution/src/bin) and Thaw's class-data sharing archive, on a real layout: bin/
 * from the source tree, lib/ with the jars of this module's class path, this JDK. bin/thaw-cds makes the archive from
 * a class list; bin/thaw passes it only with the class path it was made with, and a JVM whose archive has gone stale
 * still starts, silently.
 */
class LauncherTest {

  private static final Path BIN = Path.of("..", "distribution", "src", "bin");
  private static final String CLI_SHARED = "dev.thaw.cli.ThawCli source: shared objects file";
  private static final String OBJECT_SHARED = "java.lang.Object source: shared objects file";

  @TempDir
  Path home;

  private String version;
  /** Whether this JDK ships its own archive (lib/server/classes.jsa): most builds do, some do not. */
  private final boolean jdkArchive = Files.isRegularFile(Path.of(System.getProperty("java.home"), "lib", "server",
      "classes.jsa"));

  @BeforeEach
  void layout() throws Exception {
    assumeTrue(Files.isRegularFile(BIN.resolve("thaw")), "no " + BIN.toAbsolutePath() + " (not run from cli/)");
    Files.createDirectories(home.resolve("bin"));
    for (String f : List.of("thaw", "thaw-cds", "thaw-java.bash")) {
      Files.copy(BIN.resolve(f), home.resolve("bin").resolve(f), StandardCopyOption.COPY_ATTRIBUTES);
    }
    Path lib = Files.createDirectories(home.resolve("lib"));
    int n = 0;
    for (String entry : System.getProperty("java.class.path").split(File.pathSeparator)) {
      Path p = Path.of(entry);
      if (entry.endsWith(".jar") && Files.isRegularFile(p)) {
        // Linked, not copied: a jar's size and time are what the archive checks, and they are the target's.
        Files.createSymbolicLink(lib.resolve(String.format("%03d-%s", n++, p.getFileName())), p.toAbsolutePath());
      } else if (Files.isDirectory(p) && !p.getFileName().toString().equals("test-classes")) {
        jar(p, lib.resolve(String.format("%03d-classes.jar", n++)));
      }
    }
    Files.writeString(lib.resolve("thaw.classlist"), "dev/thaw/cli/ThawCli\npicocli/CommandLine\n");
    version = thaw(Map.of()).out;
  }

  @Test
  void theArchiveIsPassedWhereThawCdsMadeItForThisClassPath() throws Exception {
    Run none = thaw(Map.of("THAW_JAVA_OPTS", "-Xlog:class+load=info"));
    assertFalse(none.out.contains(CLI_SHARED), "no archive yet");
    assertTrue(!jdkArchive || none.out.contains(OBJECT_SHARED), "the JDK's own archive");

    Run made = run(List.of(home.resolve("bin/thaw-cds").toString()), Map.of());
    assertEquals(0, made.exit, made.out);
    assertTrue(Files.isRegularFile(home.resolve("lib/thaw.jsa")) && Files.isRegularFile(home.resolve("lib/thaw.jsa.cp")));
    Run with = thaw(Map.of("THAW_JAVA_OPTS", "-XX:+PrintCommandLineFlags -Xlog:class+load=info"));
    assertEquals(0, with.exit, with.out);
    assertTrue(with.out.contains("-XX:SharedArchiveFile=" + home.toRealPath().resolve("lib/thaw.jsa")), with.out);
    assertTrue(with.out.contains(CLI_SHARED), "the CLI's classes come from the archive");

    Run declined = thaw(Map.of("THAW_JAVA_OPTS", "-Xshare:auto -Xlog:class+load=info"));
    assertFalse(declined.out.contains(CLI_SHARED), "THAW_JAVA_OPTS chose the JDK's archive only");
    assertTrue(!jdkArchive || declined.out.contains(OBJECT_SHARED));
  }

  @Test
  void aStaleArchiveIsIgnoredSilentlyAndAnotherClassPathNeverGetsIt() throws Exception {
    assertEquals(0, run(List.of(home.resolve("bin/thaw-cds").toString()), Map.of()).exit);

    // A jar replaced since (its time differs): the JVM checks it and ignores the archive, without a word.
    Path jar;
    try (Stream<Path> jars = Files.list(home.resolve("lib"))) {
      jar = jars.filter(p -> p.getFileName().toString().contains("picocli")).findFirst().orElseThrow();
    }
    Path real = jar.toRealPath();
    Files.delete(jar);
    Files.copy(real, jar);
    Files.setLastModifiedTime(jar, FileTime.fromMillis(Files.getLastModifiedTime(real).toMillis() - 60_000));
    Run stale = thaw(Map.of());
    assertEquals(0, stale.exit, stale.out);
    assertEquals(version, stale.out, "nothing but the version on the way out");
    assertFalse(thaw(Map.of("THAW_JAVA_OPTS", "-Xlog:class+load=info")).out.contains(CLI_SHARED));

    // Not an archive at all: the same.
    Files.write(home.resolve("lib/thaw.jsa"), new byte[4096]);
    Run garbage = thaw(Map.of());
    assertEquals(0, garbage.exit, garbage.out);
    assertEquals(version, garbage.out);

    // One more jar: the class path is not the archive's, so bin/thaw does not pass it and the JDK's archive stays.
    assertEquals(0, run(List.of(home.resolve("bin/thaw-cds").toString()), Map.of()).exit);
    Files.copy(real, home.resolve("lib/zzz-extra.jar"));
    Run other = thaw(Map.of("THAW_JAVA_OPTS", "-XX:+PrintCommandLineFlags -Xlog:class+load=info"));
    assertEquals(0, other.exit, other.out);
    assertFalse(other.out.contains("SharedArchiveFile"), other.out);
    assertTrue(!jdkArchive || other.out.contains(OBJECT_SHARED), "the JDK's own archive is kept");
  }

  private record Run(int exit, String out) {}

  private Run thaw(Map<String, String> env) throws Exception {
    return run(List.of(home.resolve("bin/thaw").toString(), "--version"), env);
  }

  private Run run(List<String> command, Map<String, String> env) throws Exception {
    ProcessBuilder pb = new ProcessBuilder(new ArrayList<>(command)).redirectErrorStream(true);
    pb.environment().put("JAVA_HOME", System.getProperty("java.home"));
    pb.environment().remove("THAW_JAVA_OPTS");
    pb.environment().putAll(env);
    Process p = pb.start();
    p.getOutputStream().close();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(p.waitFor(120, TimeUnit.SECONDS), "still running: " + command);
    return new Run(p.exitValue(), out);
  }

  private static void jar(Path classes, Path jar) throws IOException {
    try (OutputStream file = Files.newOutputStream(jar); JarOutputStream out = new JarOutputStream(file);
        Stream<Path> files = Files.walk(classes)) {
      for (Path f : (Iterable<Path>) files.filter(Files::isRegularFile)::iterator) {
        out.putNextEntry(new JarEntry(classes.relativize(f).toString().replace(File.separatorChar, '/')));
        Files.copy(f, out);
        out.closeEntry();
      }
    }
  }
}
