package dev.thaw.pool.impl;

import dev.thaw.pool.worker.WorkerMain;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

/**
 * What the parent says about a worker that failed: how its process ended and the end of its stderr. For the pool's
 * exceptions and the server's log only: a worker's output is the function's, never something to hand a client.
 */
final class WorkerLogs {

  private static final int TAIL_BYTES = 2000;

  private WorkerLogs() {}

  /** True if the process exits within 200 ms. */
  static boolean exitsSoon(Process process) {
    try {
      return process.waitFor(200, TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
  }

  /** How the process ended (waiting up to 2 s for it); empty when it has not. */
  static String exitDescription(Process process) {
    try {
      if (process.waitFor(2, TimeUnit.SECONDS)) {
        int s = process.exitValue();
        String what = s > 128 ? "killed by signal " + (s - 128)
            : s == WorkerMain.EXIT_STICKY ? "a sticky CUDA error"
            : s == WorkerMain.EXIT_PROTOCOL ? "a protocol error"
            : s == WorkerMain.EXIT_STARTUP ? "a start-up failure"
            : s == WorkerMain.EXIT_PARENT_GONE ? "its stdin closed"
            : s == WorkerMain.EXIT_RESTORE_FAILED ? "its restore failed"
            : "exit status " + s;
        return ": exit status " + s + " (" + what + ")";
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    return "";
  }

  /** The end of the worker's stderr, for messages; empty when there is none. */
  static String tail(Path log) {
    try (RandomAccessFile f = new RandomAccessFile(log.toFile(), "r")) {
      long n = f.length();
      if (n == 0) {
        return "";
      }
      int take = (int) Math.min(n, TAIL_BYTES);
      byte[] b = new byte[take];
      f.seek(n - take);
      f.readFully(b);
      return "; its stderr ends:\n" + new String(b, StandardCharsets.UTF_8).strip();
    } catch (IOException e) {
      return "";
    }
  }
}
