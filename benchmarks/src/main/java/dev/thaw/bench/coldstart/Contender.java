package dev.thaw.bench.coldstart;

import dev.thaw.bench.coldstart.ColdStartResult.Sample;
import java.util.List;
import java.util.Optional;

/**
 * One way to get a model's first response from nothing running: the thing the harness compares. Each is a
 * plug-in; {@link Contenders#all()} lists them in the order they run.
 *
 * <p>A contender runs {@code runs} cold starts of a model, each from fresh state as the contender defines it
 * (a new process; a suspended process resumed), and returns one {@link Sample} per cold start with its time to
 * first response, where that time went, and the answer. It must print its response (or have it printed) only
 * after the work is done, so the time is honest.
 */
interface Contender {

  /** A stable name: the JSON's key and the {@code --contenders} option's value. */
  String id();

  /** How reports and plots name it. */
  String label();

  /** Whether it takes part in the image-size sweep (it runs every model), or only in the main models. */
  boolean sweeps();

  /** Why it cannot run in this harness run (no GPU, no PyTorch), or empty when it can. */
  Optional<String> unavailable(Bench bench);

  /**
   * Runs {@code runs} cold starts of {@code model}.
   *
   * @throws ContenderException if it fails: the reason goes into the report, the other contenders go on
   */
  List<Sample> run(Bench bench, PreparedModel model, int runs) throws ContenderException, InterruptedException;

  /** A contender failed; its message is the reason the report gives. */
  final class ContenderException extends Exception {
    public ContenderException(String message) {
      super(message);
    }

    public ContenderException(String message, Throwable cause) {
      super(message, cause);
    }
  }
}
