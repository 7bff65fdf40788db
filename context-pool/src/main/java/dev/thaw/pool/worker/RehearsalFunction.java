package dev.thaw.pool.worker;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import dev.thaw.runtime.check.CheckKernels;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.Dim3;

/**
 * The function of the image a worker rehearses a restore with at start ({@link WorkerWarmup#rehearse}): it has
 * one module (the check kernels, loaded from PTX) and answers every request by filling its written allocations,
 * each launch gated on the allocation it names. Never built into an image of the store.
 */
public final class RehearsalFunction implements ThawFunction<RehearsalFunction.State> {

  /**
   * @param fill the fill kernel ({@link CheckKernels#FILL_U32})
   * @param allocations how many allocations {@code rehearsal.<i>} the image has; the odd ones are written
   */
  public record State(KernelRef fill, int allocations) {}

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  @Override
  public State init(FunctionSession session, JsonNode config) {
    throw new UnsupportedOperationException("the rehearsal image is made in memory, never built");
  }

  /** Fills the first 1 KiB of every written allocation: launches the residency gate waits for, one by one. */
  @Override
  public FunctionResponse invoke(FunctionSession session, State state, FunctionRequest request) {
    for (int i = 1; i < state.allocations(); i += 2) {
      session.launch(state.fill(), Dim3.of(1), Dim3.of(256), new BufferRef("rehearsal." + i), i, 256);
    }
    session.synchronize();
    return FunctionResponse.of(JsonNodeFactory.instance.objectNode());
  }
}
