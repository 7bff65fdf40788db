package dev.thaw.pool.impl;

import dev.thaw.pool.ContextPoolOptions;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The java binary and class path of a worker: by default this process's own, so a worker runs on the same JVM
 * and jars as its parent — the source tree's JDK and {@code target/} jars, or the tarball's {@code runtime/bin/java}
 * and {@code lib/*} (the launcher's wildcard is expanded by the JVM into {@code java.class.path}).
 */
final class WorkerCommand {

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
}
