package dev.thaw.runtime.gpu.contract;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/** The contract suite's kernel module (from {@code src/test/cuda/contract.cu}). */
final class ContractKernels {

  static final String EMPTY = "thaw_test_empty";
  static final String SAXPY = "thaw_test_saxpy";
  static final String STRUCT = "thaw_test_struct";
  static final String SCALARS = "thaw_test_scalars";
  static final String STORE = "thaw_test_store";

  private ContractKernels() {}

  static String ptx() {
    try (InputStream in = ContractKernels.class.getResourceAsStream("contract.ptx")) {
      if (in == null) {
        throw new IllegalStateException("contract.ptx is missing from the test resources");
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
