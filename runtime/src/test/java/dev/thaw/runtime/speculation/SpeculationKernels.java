package dev.thaw.runtime.speculation;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/** The speculation tests' kernels: PTX made by nvcc from {@code src/test/cuda/speculation.cu}. */
final class SpeculationKernels {

  static final String MODULE = "spec";

  private SpeculationKernels() {}

  static String ptx() {
    return resource("/dev/thaw/runtime/speculation/speculation.ptx");
  }

  /**
   * A module of only {@code entries} of {@link #ptx()} (under the same names, so the sim's twins run them), for
   * GPU profiling: the whole module cannot be instrumented ({@code spec_indirect} calls through a register).
   * Each entry must call no {@code .func}.
   */
  static String ptxOf(String... entries) {
    String all = ptx();
    StringBuilder out = new StringBuilder(all.substring(0, all.indexOf("\n.func") + 1));
    for (String e : entries) {
      int start = all.indexOf("\t// .globl\t" + e + "\n");
      int end = all.indexOf("\n}\n", start);
      if (start < 0 || end < 0) {
        throw new IllegalArgumentException("no entry " + e + " in " + MODULE);
      }
      out.append(all, start, end + 3);
    }
    return out.toString();
  }

  static String contractPtx() {
    return resource("/dev/thaw/runtime/gpu/contract/contract.ptx");
  }

  static String resource(String path) {
    try (InputStream in = SpeculationKernels.class.getResourceAsStream(path)) {
      return new String(in.readAllBytes(), StandardCharsets.US_ASCII);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
