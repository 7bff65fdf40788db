package dev.thaw.examples.mlp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.Random;

/**
 * One {@code mlp_linear} launch on any device, with an independent reference: inputs made from a seed, y
 * allocated with {@link #TAIL} sentinel floats past its end that the kernel must leave alone.
 */
final class LinearRun {

  static final int TAIL = 64;
  static final int SENTINEL = 0x7fc0dead;

  final int m;
  final int n;
  final int k;
  final boolean relu;
  final float[] x;
  final float[] w;
  final float[] b;

  LinearRun(int m, int n, int k, boolean relu, long seed) {
    this.m = m;
    this.n = n;
    this.k = k;
    this.relu = relu;
    Random r = new Random(seed);
    x = new float[m * k];
    w = new float[k * n];
    b = new float[n];
    for (int i = 0; i < x.length; i++) {
      x[i] = 4 * r.nextFloat() - 2;
    }
    for (int i = 0; i < w.length; i++) {
      w[i] = (2 * r.nextFloat() - 1) / (float) Math.sqrt(Math.max(k, 1));
    }
    for (int i = 0; i < b.length; i++) {
      b[i] = r.nextFloat() - 0.5f;
    }
  }

  @Override
  public String toString() {
    return "mlp_linear M=" + m + " N=" + n + " K=" + k + (relu ? " relu" : "");
  }

  /** y (plus its tail) after one launch on {@code ctx} with the given dimensions. */
  float[] run(GpuContext ctx, Dim3 grid, Dim3 block) {
    try (FunctionSession s = FunctionSession.record(ctx)) {
      String ptx = MlpFunction.ptx();
      s.loadModule("mlp", ptx);
      KernelRef kernel = s.kernelRef("mlp", "mlp_linear");
      BufferRef xb = upload(s, "x", x);
      BufferRef wb = upload(s, "w", w);
      BufferRef bb = upload(s, "b", b);
      int[] sentinel = new int[m * n + TAIL];
      Arrays.fill(sentinel, SENTINEL);
      ByteBuffer yBytes = ByteBuffer.allocateDirect(4 * sentinel.length).order(ByteOrder.LITTLE_ENDIAN);
      yBytes.asIntBuffer().put(sentinel);
      BufferRef yb = s.allocate("y", yBytes.capacity());
      s.upload(yb, 0, yBytes);
      ctx.synchronize();
      s.launch(kernel, grid, block, xb, wb, bb, yb, m, n, k, relu ? 1 : 0);
      s.synchronize();
      ByteBuffer out = ByteBuffer.allocateDirect(yBytes.capacity()).order(ByteOrder.LITTLE_ENDIAN);
      s.download(yb, 0, out);
      float[] y = new float[sentinel.length];
      out.asFloatBuffer().get(y);
      return y;
    }
  }

  /** The grid that gives each 64x64 tile its own block, and the one block shape the kernel computes with. */
  float[] run(GpuContext ctx) {
    int tiles = Math.max(1, ((m + 63) / 64) * ((n + 63) / 64));
    return run(ctx, Dim3.of(tiles), Dim3.of(MlpSimKernels.LINEAR_THREADS));
  }

  private static BufferRef upload(FunctionSession s, String name, float[] v) {
    ByteBuffer bytes = ByteBuffer.allocateDirect(Math.max(4, 4 * v.length)).order(ByteOrder.LITTLE_ENDIAN);
    bytes.asFloatBuffer().put(v);
    BufferRef ref = s.allocate(name, bytes.capacity());
    s.upload(ref, 0, bytes);
    return ref;
  }

  /** TF32 by arithmetic, not bits: to 11 significant bits, nearest, ties away from zero. */
  static float tf32(float v) {
    if (!Float.isFinite(v) || v == 0) {
      return v;
    }
    double q = Math.scalb(1.0, Math.max(Math.getExponent(v), Float.MIN_EXPONENT) - 10);
    return (float) (Math.signum(v) * Math.floor(Math.abs(v) / q + 0.5) * q);
  }

  /** Sum of |tf32(x) tf32(w)| + |b| for output (row, col): the scale of its rounding error. */
  double scale(int row, int col) {
    double s = Math.abs(b[col]);
    for (int kk = 0; kk < k; kk++) {
      s += Math.abs((double) tf32(x[row * k + kk]) * tf32(w[kk * n + col]));
    }
    return s;
  }

  double expected(int row, int col) {
    double sum = 0;
    for (int kk = 0; kk < k; kk++) {
      sum += (double) tf32(x[row * k + kk]) * tf32(w[kk * n + col]);
    }
    float v = (float) sum + b[col];
    return relu && !(v > 0) ? 0 : v;
  }

  /**
   * Asserts {@code y} is the TF32 product within {@code ulpsPerTerm * (K + 2) * 2^-23} of each output's scale
   * (fp32 sums in any order), and that the tail is untouched.
   */
  void assertMatches(String device, float[] y, double ulpsPerTerm) {
    for (int r = 0; r < m; r++) {
      for (int c = 0; c < n; c++) {
        double exp = expected(r, c);
        float got = y[r * n + c];
        double tol = ulpsPerTerm * (k + 2) * 0x1p-23 * scale(r, c);
        if (!(Math.abs(got - exp) <= tol)) {
          fail(String.format("%s on %s: row %d column %d: expected %.9g, got %.9g (bits %08x); |diff| %.3g > %.3g",
              this, device, r, c, exp, got, Float.floatToRawIntBits(got), Math.abs(got - exp), tol));
        }
      }
    }
    for (int i = m * n; i < y.length; i++) {
      assertEquals(SENTINEL, Float.floatToRawIntBits(y[i]), this + " on " + device + ": wrote y[" + i
          + "], past its M*N = " + m * n + " outputs");
    }
  }
}
