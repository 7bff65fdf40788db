package dev.thaw.pool.impl;

import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.worker.WorkerMain;
import dev.thaw.runtime.gpu.DeviceChoice;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * A worker JVM started before its pool exists: {@code thaw serve} starts one as its {@code main} begins, and the
 * pool's first spawn takes it over where it would start the very same command. The JVM starts, loads its classes and
 * runs {@code cuInit} while the server parses its options ({@code docs/design/server.md}) and then waits on its
 * stdin for the config, which the taking spawn writes as the first line ({@link WorkerMain}'s {@code -} argument). A process nobody
 * takes ends when this one does (its stdin closes) or at {@link #discard()}.
 */
final class Prelaunch {

  /** The prelaunched worker: its process, what started it, when, and where its stderr goes. */
  record Early(Process process, List<String> command, String deviceEnv, long spawnNanos, Path log) {}

  private static Early early;

  private Prelaunch() {}

  /** The command a worker of {@code o} runs, without its config: what a prelaunched process must have been. */
  static List<String> command(ContextPoolOptions o) {
    List<String> command = new ArrayList<>();
    command.add(WorkerCommand.java(o));
    // The JVM writes its own messages (a fatal error's report among them) to stdout, which carries frames here.
    command.addAll(WorkerCommand.LOG_TO_STDERR);
    command.addAll(WorkerCommand.classDataSharing(o));
    command.addAll(o.jvmOptions());
    command.add("-cp");
    command.add(WorkerCommand.classPath(o));
    command.add(WorkerMain.class.getName());
    return command;
  }

  /** Starts a worker JVM for a pool of {@code o} (nothing if one is waiting already). */
  static synchronized void start(ContextPoolOptions o) throws IOException {
    if (early != null) {
      return;
    }
    long spawnNanos = System.nanoTime();
    Path log = Files.createTempFile("thaw-worker-", ".log");
    List<String> command = command(o);
    List<String> withArg = new ArrayList<>(command);
    withArg.add(WorkerMain.CONFIG_ON_STDIN);
    ProcessBuilder pb = builder(withArg, o, log);
    early = new Early(pb.start(), command, o.deviceChoice(), spawnNanos, log);
  }

  static ProcessBuilder builder(List<String> command, ContextPoolOptions o, Path log) {
    ProcessBuilder pb = new ProcessBuilder(command)
        .redirectInput(ProcessBuilder.Redirect.PIPE)
        .redirectOutput(ProcessBuilder.Redirect.PIPE)
        .redirectError(log.toFile());
    pb.environment().putAll(o.environment());
    if (o.deviceChoice() != null) {
      pb.environment().put(DeviceChoice.ENV, o.deviceChoice());
    }
    return pb;
  }

  /**
   * The prelaunched worker, if it is alive and was started as a worker of {@code o} would be (same command, no other
   * environment, the same device choice); null otherwise. Taken once: a later call finds none.
   */
  static synchronized Early take(ContextPoolOptions o) {
    Early e = early;
    if (e == null) {
      return null;
    }
    early = null;
    boolean same = e.process().isAlive() && e.command().equals(command(o)) && o.environment().isEmpty()
        && Objects.equals(e.deviceEnv(), o.deviceChoice());
    if (!same) {
      kill(e);
      return null;
    }
    return e;
  }

  /** Ends the prelaunched worker nobody took, if any. */
  static synchronized void discard() {
    Early e = early;
    early = null;
    if (e != null) {
      kill(e);
    }
  }

  private static void kill(Early e) {
    e.process().destroyForcibly();
    try {
      Files.deleteIfExists(e.log());
    } catch (IOException ignored) {
      // A temporary file.
    }
  }

  /** For tests: the prelaunched worker's process while it waits to be taken, or null. */
  static synchronized Process waiting() {
    return early == null ? null : early.process();
  }
}
