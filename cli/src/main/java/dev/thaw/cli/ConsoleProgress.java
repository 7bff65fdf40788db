package dev.thaw.cli;

import dev.thaw.image.ProgressListener;
import me.tongfei.progressbar.ProgressBar;
import me.tongfei.progressbar.ProgressBarBuilder;
import me.tongfei.progressbar.ProgressBarStyle;

/** A progress bar on stderr, in MiB; {@link ProgressListener#NONE} when stdout is no terminal or output is JSON. */
final class ConsoleProgress implements ProgressListener {

  private volatile ProgressBar bar;

  static ProgressListener forOutput(boolean json) {
    return json || System.console() == null ? ProgressListener.NONE : new ConsoleProgress();
  }

  @Override
  public synchronized void start(String phase, long totalBytes) {
    bar = new ProgressBarBuilder().setTaskName(phase).setInitialMax(totalBytes).setUnit(" MiB", 1 << 20)
        .setStyle(ProgressBarStyle.ASCII).showSpeed().continuousUpdate().build();
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
