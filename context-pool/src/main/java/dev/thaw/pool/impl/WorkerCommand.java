package dev.thaw.pool.impl;

import dev.thaw.pool.ContextPoolOptions;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * The java binary, class path and JVM options of a worker: by default this process's own, so a worker runs on the
 * same JVM and jars as its parent — the source tree's JDK and {@code target/} jars, or the tarball's
 * {@code runtime/bin/java} and {@code lib/*.jar} — and maps the same class-data sharing archive (the distribution's
 * {@code lib/thaw.jsa}, which {@code bin/thaw} names on the command line where it matches the install).
 */
final class WorkerCommand {

  /**
   * The JVM's own log (unified logging) to stderr, which is the worker's log file: its default, stdout, carries the
   * frames, and a warning there (an archive the JVM cannot use, a thread it could not start) would break the protocol.
   * {@code -XX:+DisplayVMOutputToStderr} covers the JVM's other output. Given before the pool's own options, which may
   * log more.
   */
  static final List<String> LOG_TO_STDERR = List.of("-XX:+DisplayVMOutputToStderr", "-Xlog:disable",
      "-Xlog:all=warning:stderr");

  /** The java launcher's options whose value is the next argument. */
  private static final Set<String> WITH_VALUE = Set.of("-cp", "-classpath", "--class-path", "-p",
      "--module-path", "--upgrade-module-path", "--add-modules", "--limit-modules", "--add-reads", "--add-exports",
      "--add-opens", "--patch-module", "--enable-native-access");

  private WorkerCommand() {}

  static String java(ContextPoolOptions o) {
    if (o.javaCommand() != null) {
      return o.javaCommand();
    }
    String running = ProcessHandle.current().info().command().orElse(null);
    if (running != null && Files.isExecutable(Path.of(running))) {
      return running;
    }
    Path home = Path.of(System.getProperty("java.home"), "bin", "java");
    return Files.isExecutable(home) ? home.toString() : "java";
  }

  static String classPath(ContextPoolOptions o) {
    return o.classPath() != null ? o.classPath() : System.getProperty("java.class.path");
  }

  /** {@link #classDataSharing(ContextPoolOptions, List)} with this process's own command line. */
  static List<String> classDataSharing(ContextPoolOptions o) {
    return classDataSharing(o, ProcessHandle.current().info().arguments().map(List::of).orElse(List.of()));
  }

  /**
   * This process's class-data sharing options ({@code -XX:SharedArchiveFile=…}, {@code -Xshare:…}) as
   * {@code parentArguments} name them, for a worker that runs on this process's java and class path: an archive is
   * valid only with the class path it was made with (JDK 17 checks it, and each jar's size and time, at every start,
   * and ignores an archive that does not match). None where the pool names its own java, class path or sharing
   * options.
   */
  static List<String> classDataSharing(ContextPoolOptions o, List<String> parentArguments) {
    if (o.javaCommand() != null || o.classPath() != null || o.jvmOptions().stream().anyMatch(WorkerCommand::sharing)) {
      return List.of();
    }
    List<String> options = new ArrayList<>();
    for (int i = 0; i < parentArguments.size(); i++) {
      String a = parentArguments.get(i);
      if (!a.startsWith("-") || a.equals("-jar") || a.equals("-m") || a.equals("--module")) {
        break;   // the main class (or jar, or module): the program's own arguments follow
      }
      if (WITH_VALUE.contains(a)) {
        i++;
      } else if (sharing(a)) {
        options.add(a);
      }
    }
    return options;
  }

  private static boolean sharing(String option) {
    return option.startsWith("-XX:SharedArchiveFile=") || option.startsWith("-Xshare:");
  }
}
