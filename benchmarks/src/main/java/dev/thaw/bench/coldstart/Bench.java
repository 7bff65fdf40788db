package dev.thaw.bench.coldstart;

import java.io.PrintStream;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Optional;

/**
 * What a contender gets from the harness: how to start Thaw and PyTorch, and what this host can do.
 *
 * @param thaw how to start {@code thaw}
 * @param python the PyTorch side, or null when it cannot run here
 * @param pythonUnavailableReason why it cannot, or null
 * @param checkpointApiMissingReason why the driver's checkpoint calls cannot be used, or null
 * @param work the work folder
 * @param childTimeout how long one child process may run
 * @param log where progress goes
 * @param pool the context pool the pooled contenders share
 * @param out the run's output folder (traces go to its {@code traces/})
 */
record Bench(ThawCommand thaw, PythonSide python, String pythonUnavailableReason,
    String checkpointApiMissingReason, Path work, Duration childTimeout, PrintStream log, HarnessPool pool,
    Path out) {

  Optional<String> pythonUnavailable() {
    return Optional.ofNullable(pythonUnavailableReason);
  }

  Optional<String> checkpointApiMissing() {
    return Optional.ofNullable(checkpointApiMissingReason);
  }
}
