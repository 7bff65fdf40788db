package dev.thaw.cli;

import dev.thaw.image.ProgressListener;
import java.io.PrintStream;
import me.tongfei.progressbar.ConsoleProgressBarConsumer;
import me.tongfei.progressbar.ProgressBar;
import me.tongfei.progressbar.ProgressBarBuilder;
import me.tongfei.progressbar.ProgressBarStyle;

/**
 * A progress bar on stderr, in MiB. Never on stdout, which carries a command's result (its JSON with {@code
 * --json}); by default only when the console is a terminal and the output is not JSON.
 */
final class ConsoleProgress implements ProgressListener {

  private final PrintStream err;
  private volatile ProgressBar bar;

  private ConsoleProgress(PrintStream err) {
    this.err = err;
  }

  /** The default: a bar when the console is a terminal and the output is not JSON, else none. */
  static ProgressListener forOutput(boolean json) {
    return choose(null, json);
  }

  /**
   * A bar if {@code asked} ({@code --progress}), none if asked not to ({@code --no-progress}), else {@link
   * #forOutput}.
   */
  static ProgressListener choose(Boolean asked, boolean json) {
    boolean show = asked != null ? asked : !json && System.console() != null;
    return show ? new ConsoleProgress(System.err) : ProgressListener.NONE;
  }

  @Override
  public synchronized void start(String phase, long totalBytes) {
    bar = new ProgressBarBuilder().setTaskName(phase).setInitialMax(totalBytes).setUnit(" MiB", 1 << 20)
        .setStyle(ProgressBarStyle.ASCII).showSpeed().continuousUpdate()
        .setConsumer(new ConsoleProgressBarConsumer(err)).build();
  }

  @Override
  public void advance(long bytes) {
    ProgressBar b = bar;
    if (b != null) {
      b.stepBy(bytes);
    }
  }

  @Override
  public synchronized void finish() {
    if (bar != null) {
      bar.close();
      bar = null;
    }
  }
}
