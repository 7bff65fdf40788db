package dev.thaw.runtime.gpu;

/** Grid or block dimensions. Each must be at least 1. */
public record Dim3(int x, int y, int z) {

  public Dim3 {
    if (x < 1 || y < 1 || z < 1) {
      throw new IllegalArgumentException("dimensions must be at least 1: (" + x + ", " + y + ", " + z + ")");
    }
  }

  public static Dim3 of(int x) {
    return new Dim3(x, 1, 1);
  }

  public static Dim3 of(int x, int y) {
    return new Dim3(x, y, 1);
  }

  public long total() {
    return (long) x * y * z;
  }
}
