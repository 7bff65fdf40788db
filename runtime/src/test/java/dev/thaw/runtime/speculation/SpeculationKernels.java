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
