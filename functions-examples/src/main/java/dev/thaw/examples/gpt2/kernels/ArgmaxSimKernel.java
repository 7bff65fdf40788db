package dev.thaw.examples.gpt2.kernels;

import dev.thaw.examples.transformer.ArgmaxSim;

/** {@code gpt2_argmax(logits, out, M, V)}: the rule of {@link ArgmaxSim}. */
public final class ArgmaxSimKernel extends ArgmaxSim {

  public ArgmaxSimKernel() {
    super(Gpt2Kernels.ARGMAX);
  }
}
