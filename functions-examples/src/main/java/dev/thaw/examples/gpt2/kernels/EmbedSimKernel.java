package dev.thaw.examples.gpt2.kernels;

import dev.thaw.runtime.gpu.sim.DeviceMemory;
import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;

/**
 * {@code gpt2_embed(wte, wpe, tokens, positions, x, M, C)}: {@code x[m,c] = float(wte[tokens[m],c]) +
 * float(wpe[positions[m],c])}. Bit-exact with the CUDA kernel (one fp32 add). Grid-stride there: any grid.
 */
public final class EmbedSimKernel implements SimKernel {

  @Override
  public String entry() {
    return Gpt2Kernels.EMBED;
  }

  @Override
  public void launch(SimLaunch launch) {
    long wte = launch.pointer(0);
    long wpe = launch.pointer(1);
    long tokens = launch.pointer(2);
    long positions = launch.pointer(3);
    long x = launch.pointer(4);
    int M = launch.intArg(5);
    int C = launch.intArg(6);
    if (M <= 0 || C <= 0) {
      return;
    }
    DeviceMemory memory = launch.memory();
    int[] tok = SimIo.readInts(memory, tokens, M);
    int[] pos = SimIo.readInts(memory, positions, M);
    short[] scratch = new short[C];
    float[] te = new float[C];
    float[] pe = new float[C];
    for (int m = 0; m < M; m++) {
      SimIo.readHalves(memory, wte + 2L * tok[m] * C, scratch, te, 0, C);
      SimIo.readHalves(memory, wpe + 2L * pos[m] * C, scratch, pe, 0, C);
      for (int c = 0; c < C; c++) {
        te[c] += pe[c];
      }
      memory.putFloats(x + 4L * m * C, te, 0, C);
    }
  }
}
