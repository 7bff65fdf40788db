package dev.thaw.examples.mlp;

import java.util.List;

/**
 * The MLP computed independently of the device code: plain double arithmetic, no TF32, with a first-order
 * bound on how far a TF32 tensor-core result may lie from it, carried through the layers.
 *
 * <p>Per layer, with reference activations {@code a}, their bound {@code e}, {@code u = 2^-11} (the relative
 * error of rounding to TF32, nearest) and {@code S = sum_k (|a_k| + e_k) |w_kn|}: rounding both operands costs
 * at most {@code (2u + u^2) S}, the incoming error at most {@code (1 + u)^2 sum_k e_k |w_kn|}, and summing
 * {@code K} fp32 terms plus the bias (in any order, even truncating) at most {@code (K + 2) 2^-23 (S + |b_n|)}.
 * ReLU does not grow an error. The bound is padded by 1 %, for second-order terms.
 */
final class MlpReference {

  private static final double U = 0x1p-11;
  private static final double FP32 = 0x1p-23;

  /**
   * @param outputs the output layer, {@code [row][column]}
   * @param bounds how far a TF32 result may lie from each output
   * @param scales each output's {@code sum_k |a_k w_kn| + |b_n|}: the natural scale of a dot product's error
   * @param largestTerms each output's {@code max_k |a_k w_kn|}
   */
  record Result(double[][] outputs, double[][] bounds, double[][] scales, double[][] largestTerms) {}

  private MlpReference() {}

  static Result forward(List<Integer> layers, float[][] weights, float[][] biases, float[] input, int rows) {
    int in = layers.get(0);
    double[][] outputs = new double[rows][];
    double[][] bounds = new double[rows][];
    double[][] scales = new double[rows][];
    double[][] largest = new double[rows][];
    for (int r = 0; r < rows; r++) {
      double[] a = new double[in];
      double[] e = new double[in];
      for (int k = 0; k < in; k++) {
        a[k] = input[r * in + k];
      }
      double[] scale = null;
      double[] big = null;
      for (int l = 0; l + 1 < layers.size(); l++) {
        int kk = layers.get(l);
        int n = layers.get(l + 1);
        boolean relu = l + 2 < layers.size();
        double[] z = new double[n];
        double[] ez = new double[n];
        scale = new double[n];
        big = new double[n];
        for (int j = 0; j < n; j++) {
          double sum = 0;
          double s = 0;
          double carried = 0;
          double plain = 0;
          for (int k = 0; k < kk; k++) {
            double wv = weights[l][k * n + j];
            sum += a[k] * wv;
            s += (Math.abs(a[k]) + e[k]) * Math.abs(wv);
            carried += e[k] * Math.abs(wv);
            plain += Math.abs(a[k] * wv);
            big[j] = Math.max(big[j], Math.abs(a[k] * wv));
          }
          double b = biases[l][j];
          z[j] = relu ? Math.max(0, sum + b) : sum + b;
          double bound = (1 + U) * (1 + U) * carried + (2 * U + U * U) * s + (kk + 2) * FP32 * (s + Math.abs(b));
          ez[j] = 1.01 * bound;
          scale[j] = plain + Math.abs(b);
        }
        a = z;
        e = ez;
      }
      outputs[r] = a;
      bounds[r] = e;
      scales[r] = scale;
      largest[r] = big;
    }
    return new Result(outputs, bounds, scales, largest);
  }

  /** The first index of the row's maximum, as the function reports it. */
  static int argmax(double[] row) {
    int best = 0;
    for (int j = 1; j < row.length; j++) {
      if (row[j] > row[best]) {
        best = j;
      }
    }
    return best;
  }
}
