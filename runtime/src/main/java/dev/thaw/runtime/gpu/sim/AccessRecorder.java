package dev.thaw.runtime.gpu.sim;

import java.util.Arrays;

/**
 * Collects the byte ranges of one launch's reads (or writes) cheaply: the range being extended is kept in
 * two fields, so a sequential sweep costs two compares an access; a miss looks at the few ranges closed
 * last (interleaved sweeps over several arrays), and only then appends. When the arrays fill up they are
 * normalised in place before growing, so a random access pattern stays bounded by the distinct ranges.
 *
 * <p>Not thread-safe: one per launch, used on the stream worker.
 */
final class AccessRecorder {

  private static final int RECENT = 8;
  private static final int COMPACT_AT = 1 << 12;

  private long curStart = Long.MAX_VALUE;
  private long curEnd = Long.MIN_VALUE;
  private long[] starts = new long[16];
  private long[] ends = new long[16];
  private int n;

  /** Records {@code [start, end)}, {@code end > start}. */
  void add(long start, long end) {
    if (start <= curEnd && end >= curStart) {
      if (start < curStart) {
        curStart = start;
      }
      if (end > curEnd) {
        curEnd = end;
      }
      return;
    }
    addSlow(start, end);
  }

  private void addSlow(long start, long end) {
    for (int i = n - 1, stop = Math.max(0, n - RECENT); i >= stop; i--) {
      if (start <= ends[i] && end >= starts[i]) {
        long s = Math.min(start, starts[i]);
        long e = Math.max(end, ends[i]);
        // The current range takes the slot; the merged one becomes current.
        starts[i] = curStart;
        ends[i] = curEnd;
        curStart = s;
        curEnd = e;
        return;
      }
    }
    if (curStart <= curEnd) {
      push(curStart, curEnd);
    }
    curStart = start;
    curEnd = end;
  }

  private void push(long s, long e) {
    if (n == starts.length) {
      if (n >= COMPACT_AT) {
        n = normalise(starts, ends, n);
      }
      if (n > starts.length / 2) {
        starts = Arrays.copyOf(starts, starts.length * 2);
        ends = Arrays.copyOf(ends, ends.length * 2);
      }
    }
    starts[n] = s;
    ends[n] = e;
    n++;
  }

  /** The normalised log of everything recorded. The recorder must not be used afterwards. */
  AccessLog toLog() {
    if (curStart <= curEnd) {
      push(curStart, curEnd);
      curStart = Long.MAX_VALUE;
      curEnd = Long.MIN_VALUE;
    }
    if (n == 0) {
      return AccessLog.EMPTY;
    }
    int m = normalise(starts, ends, n);
    return new AccessLog(Arrays.copyOf(starts, m), Arrays.copyOf(ends, m), m);
  }

  /**
   * Sorts and merges {@code [starts[i], ends[i])} in place; returns the count left. The union of intervals
   * is where more starts than ends lie at or before a point, so starts and ends can be sorted apart; at a
   * tie starts go first, which merges touching ranges.
   */
  static int normalise(long[] starts, long[] ends, int n) {
    Arrays.sort(starts, 0, n);
    Arrays.sort(ends, 0, n);
    int i = 0;
    int j = 0;
    int depth = 0;
    int out = 0;
    long open = 0;
    while (j < n) {
      if (i < n && starts[i] <= ends[j]) {
        if (depth++ == 0) {
          open = starts[i];
        }
        i++;
      } else {
        if (--depth == 0) {
          // out <= j < i here, so neither write lands on an unread element.
          starts[out] = open;
          ends[out] = ends[j];
          out++;
        }
        j++;
      }
    }
    return out;
  }
}
