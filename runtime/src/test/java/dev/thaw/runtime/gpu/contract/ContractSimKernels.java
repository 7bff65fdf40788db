package dev.thaw.runtime.gpu.contract;

import dev.thaw.runtime.gpu.sim.DeviceMemory;
import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/** Java twins of {@code src/test/cuda/contract.cu} for the simulated device; each computes what its CUDA kernel does. */
public final class ContractSimKernels {

  private ContractSimKernels() {}

  /** The number of threads a 1-D launch runs: grid-stride loops cover {@code n} whatever it is. */
  private static long threads(SimLaunch l) {
    return l.grid().total() * l.block().total();
  }

  public static final class Empty implements SimKernel {
    @Override
    public String entry() {
      return ContractKernels.EMPTY;
    }

    @Override
    public void launch(SimLaunch l) {}
  }

  public static final class Saxpy implements SimKernel {
    @Override
    public String entry() {
      return ContractKernels.SAXPY;
    }

    @Override
    public void launch(SimLaunch l) {
      float a = l.floatArg(0);
      long x = l.longArg(1);
      long y = l.longArg(2);
      int n = l.intArg(3);
      if (n <= 0) {
        return;
      }
      DeviceMemory m = l.memory();
      float[] xs = new float[n];
      float[] ys = new float[n];
      m.getFloats(x, xs, 0, n);
      m.getFloats(y, ys, 0, n);
      for (int i = 0; i < n; i++) {
        ys[i] = Math.fma(a, xs[i], ys[i]);
      }
      m.putFloats(y, ys, 0, n);
    }
  }

  public static final class Struct implements SimKernel {
    @Override
    public String entry() {
      return ContractKernels.STRUCT;
    }

    @Override
    public void launch(SimLaunch l) {
      ByteBuffer p = ByteBuffer.wrap(l.bytesArg(0)).order(ByteOrder.LITTLE_ENDIAN);
      long out = p.getLong(0);
      int n = p.getInt(8);
      float scale = p.getFloat(12);
      float bias = (float) p.getDouble(16);
      if (n <= 0) {
        return;
      }
      float[] v = new float[n];
      for (int i = 0; i < n; i++) {
        v[i] = Math.fma(scale, (float) i, bias);
      }
      l.memory().putFloats(out, v, 0, n);
    }
  }

  public static final class Scalars implements SimKernel {
    @Override
    public String entry() {
      return ContractKernels.SCALARS;
    }

    @Override
    public void launch(SimLaunch l) {
      if (threads(l) == 0) {
        return;
      }
      DeviceMemory m = l.memory();
      long out = l.longArg(6);
      m.putDouble(out, l.byteArg(0));
      m.putDouble(out + 8, l.shortArg(1));
      m.putDouble(out + 16, l.intArg(2));
      m.putDouble(out + 24, (double) l.longArg(3));
      m.putDouble(out + 32, l.floatArg(4));
      m.putDouble(out + 40, l.doubleArg(5));
    }
  }

  public static final class Store implements SimKernel {
    @Override
    public String entry() {
      return ContractKernels.STORE;
    }

    @Override
    public void launch(SimLaunch l) {
      l.memory().putInt(l.longArg(0), l.intArg(1));
    }
  }
}
