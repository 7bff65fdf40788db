package dev.thaw.runtime.speculation;

import dev.thaw.runtime.gpu.sim.DeviceMemory;
import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;

/**
 * Java twins of {@code src/test/cuda/speculation.cu} for the sim device: each touches exactly the bytes its CUDA
 * kernel touches for the same arguments, which is what makes the validation tests mean something.
 */
public final class SpeculationSimKernels {

  private SpeculationSimKernels() {}

  /** Threads that pass {@code i < n} in a kernel that is not grid-stride. */
  private static int covered(SimLaunch l, int n) {
    return (int) Math.min(n, l.threadCount());
  }

  public static final class ArgsOnly implements SimKernel {
    @Override
    public String entry() {
      return "spec_args_only";
    }

    @Override
    public void launch(SimLaunch l) {
      long x = l.pointer(0);
      long y = l.pointer(1);
      int n = l.intArg(2);
      DeviceMemory m = l.memory();
      for (int i = 0; i < n; i++) {
        m.putFloat(y + 4L * i, 2.0f * m.getFloat(x + 4L * i));
      }
    }
  }

  public static final class PointerTable implements SimKernel {
    @Override
    public String entry() {
      return "spec_pointer_table";
    }

    @Override
    public void launch(SimLaunch l) {
      long tables = l.pointer(0);
      int k = l.intArg(1);
      long out = l.pointer(2);
      int n = l.intArg(3);
      DeviceMemory m = l.memory();
      for (int i = 0; i < n; i++) {
        long p = m.getLong(tables + 8L * (i % k));
        m.putFloat(out + 4L * i, m.getFloat(p + 4L * i));
      }
    }
  }

  public static final class WritePast implements SimKernel {
    @Override
    public String entry() {
      return "spec_write_past";
    }

    @Override
    public void launch(SimLaunch l) {
      long p = l.pointer(0);
      int total = l.intArg(1) + l.intArg(2);
      if (total > 0) {
        float[] ones = new float[total];
        Arrays.fill(ones, 1.0f);
        l.memory().putFloats(p, ones, 0, total);
      }
    }
  }

  public static final class Predicated implements SimKernel {
    @Override
    public String entry() {
      return "spec_predicated";
    }

    @Override
    public void launch(SimLaunch l) {
      long src = l.pointer(0);
      long dst = l.pointer(1);
      int threshold = l.intArg(2);
      DeviceMemory m = l.memory();
      for (int i = 0; i < covered(l, l.intArg(3)); i++) {
        int v = m.getInt(src + 4L * i);
        if (v > threshold) {
          m.putInt(dst + 4L * i, v);
        }
      }
    }
  }

  public static final class GenericPtr implements SimKernel {
    @Override
    public String entry() {
      return "spec_generic_ptr";
    }

    @Override
    public void launch(SimLaunch l) {
      long out = l.pointer(0);
      if (l.intArg(1) != 0) {
        return; // shared memory only
      }
      for (int i = 0; i < covered(l, l.intArg(2)); i++) {
        l.memory().putInt(out + 4L * i, i);
      }
    }
  }

  public static final class Generic implements SimKernel {
    @Override
    public String entry() {
      return "spec_generic";
    }

    @Override
    public void launch(SimLaunch l) {
      if (l.threadCount() == 0) {
        return;
      }
      long flag = l.pointer(0);
      long in = l.pointer(1);
      int s = 0;
      for (int i = 0; i < l.intArg(2); i++) {
        s += l.memory().getInt(in + 4L * i);
      }
      l.memory().putInt(flag, s);
    }
  }

  public static final class Calls implements SimKernel {
    @Override
    public String entry() {
      return "spec_calls";
    }

    @Override
    public void launch(SimLaunch l) {
      long in = l.pointer(0);
      long dst = l.intArg(3) != 0 ? l.pointer(1) : l.pointer(2);
      DeviceMemory m = l.memory();
      for (int i = 0; i < l.intArg(4); i++) {
        m.putFloat(dst + 4L * i, m.getFloat(in + 4L * i) + 1.0f);
      }
    }
  }

  public static final class Struct implements SimKernel {
    @Override
    public String entry() {
      return "spec_struct";
    }

    @Override
    public void launch(SimLaunch l) {
      ByteBuffer p = ByteBuffer.wrap(l.bytesArg(0)).order(ByteOrder.LITTLE_ENDIAN);
      long in = p.getLong(0);
      int n = p.getInt(8);
      float scale = p.getFloat(12);
      long out = p.getLong(16);
      long sum = p.getLong(24);
      DeviceMemory m = l.memory();
      for (int i = 0; i < n; i++) {
        float v = scale * m.getFloat(in + 4L * i);
        m.putFloat(out + 4L * i, v);
        m.putDouble(sum, m.getDouble(sum) + v);
      }
    }
  }

  public static final class Escape implements SimKernel {
    @Override
    public String entry() {
      return "spec_escape";
    }

    @Override
    public void launch(SimLaunch l) {
      if (l.threadCount() > 0) {
        l.memory().putLong(l.pointer(1), l.pointer(0));
      }
    }
  }

  public static final class Indirect implements SimKernel {
    @Override
    public String entry() {
      return "spec_indirect";
    }

    @Override
    public void launch(SimLaunch l) {
      long p = l.pointer(0);
      float v = l.intArg(2) != 0 ? 1.0f : 2.0f;
      for (int i = 0; i < l.intArg(3); i++) {
        l.memory().putFloat(p + 4L * i, v);
      }
    }
  }
}
