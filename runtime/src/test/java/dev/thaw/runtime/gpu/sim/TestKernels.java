package dev.thaw.runtime.gpu.sim;

import java.util.concurrent.Semaphore;
import java.util.concurrent.locks.LockSupport;

/** Java kernels for the sim driver's own tests, registered in the test services file. */
public final class TestKernels {

  /** The PTX declaring every test kernel, plus one entry with no Java kernel. */
  public static final String PTX = String.join("\n",
      ".version 8.0",
      ".target sm_90",
      ".address_size 64",
      "",
      ".visible .entry sim_test_scale(.param .u64 a, .param .u64 b, .param .u32 n, .param .f32 k)",
      "{",
      "  ret;",
      "}",
      ".visible .entry sim_test_add_into(.param .u64 a, .param .u64 b, .param .u64 out, .param .u32 n)",
      "{",
      "  ret;",
      "}",
      ".visible .entry sim_test_read_at(.param .u64 p, .param .u64 out)",
      "{",
      "  ret;",
      "}",
      ".visible .entry sim_test_increment(.param .u64 p, .param .u32 n, .param .u32 sleep_ms)",
      "{",
      "  ret;",
      "}",
      ".visible .entry sim_test_hold()",
      "{",
      "  ret;",
      "}",
      ".visible .entry sim_test_throws()",
      "{",
      "  ret;",
      "}",
      ".visible .entry sim_test_no_java()",
      "{",
      "  ret;",
      "}",
      "");

  private TestKernels() {}

  /** b[i] = a[i] * k for i in [0, n), floats, one element at a time. */
  public static final class Scale implements SimKernel {
    @Override
    public String entry() {
      return "sim_test_scale";
    }

    @Override
    public void launch(SimLaunch l) {
      long a = l.pointer(0);
      long b = l.pointer(1);
      int n = l.intArg(2);
      float k = l.floatArg(3);
      DeviceMemory m = l.memory();
      for (int i = 0; i < n; i++) {
        m.putFloat(b + 4L * i, m.getFloat(a + 4L * i) * k);
      }
    }
  }

  /** out[i] = a[i] + b[i], ints: interleaved reads of two arrays; a and b read in bulk for odd n. */
  public static final class AddInto implements SimKernel {
    @Override
    public String entry() {
      return "sim_test_add_into";
    }

    @Override
    public void launch(SimLaunch l) {
      long a = l.pointer(0);
      long b = l.pointer(1);
      long out = l.pointer(2);
      int n = l.intArg(3);
      DeviceMemory m = l.memory();
      if (n % 2 == 1) {
        int[] x = new int[n];
        int[] y = new int[n];
        m.getInts(a, x, 0, n);
        m.getInts(b, y, 0, n);
        for (int i = 0; i < n; i++) {
          x[i] += y[i];
        }
        m.putInts(out, x, 0, n);
        return;
      }
      for (int i = 0; i < n; i++) {
        m.putInt(out + 4L * i, m.getInt(a + 4L * i) + m.getInt(b + 4L * i));
      }
    }
  }

  /** out[0] = *p (an int): reads wherever it is told to. */
  public static final class ReadAt implements SimKernel {
    @Override
    public String entry() {
      return "sim_test_read_at";
    }

    @Override
    public void launch(SimLaunch l) {
      DeviceMemory m = l.memory();
      int v = m.getInt(l.pointer(0));
      m.putInt(l.pointer(1), v);
    }
  }

  /** Sleeps sleep_ms, then p[i] = p[i] * 2 + 1 for i in [0, n): order-sensitive, so ordering bugs show. */
  public static final class Increment implements SimKernel {
    @Override
    public String entry() {
      return "sim_test_increment";
    }

    @Override
    public void launch(SimLaunch l) {
      long p = l.pointer(0);
      int n = l.intArg(1);
      int sleepMs = l.intArg(2);
      if (sleepMs > 0) {
        LockSupport.parkNanos(sleepMs * 1_000_000L);
      }
      DeviceMemory m = l.memory();
      for (int i = 0; i < n; i++) {
        m.putInt(p + 4L * i, m.getInt(p + 4L * i) * 2 + 1);
      }
    }
  }

  /**
   * Holds its stream until the test calls {@link #release()} once per launch: what is queued behind it is not done
   * until then, however slowly the test's own thread runs.
   */
  public static final class Hold implements SimKernel {
    private static final Semaphore GATE = new Semaphore(0);

    public static void release() {
      GATE.release();
    }

    @Override
    public String entry() {
      return "sim_test_hold";
    }

    @Override
    public void launch(SimLaunch l) {
      GATE.acquireUninterruptibly();
    }
  }

  /** A kernel with a bug. */
  public static final class Throws implements SimKernel {
    @Override
    public String entry() {
      return "sim_test_throws";
    }

    @Override
    public void launch(SimLaunch l) {
      throw new ArithmeticException("kernel bug");
    }
  }
}
