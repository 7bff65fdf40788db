package dev.thaw.examples.llama;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.InvalidConfigException;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.ThawFunction;

/**
 * What an image of one rank of a tensor-parallel Llama names as its function: the rank's host state (its model's
 * sizes and buffers, which rank of how many, its exchange buffers). A rank is built with its group
 * ({@link LlamaTensorParallel#record}) and serves only with it ({@link LlamaTensorParallel#restored}): alone it
 * neither initializes nor answers, since every pass meets the other ranks twice a layer.
 */
public final class LlamaRankFunction implements ThawFunction<LlamaRankFunction.State> {

  /**
   * Rank {@code rank} of {@code ranks}: its passes' state over its shard's widths, and its buffers of the group's
   * exchanges (the attention's and the MLP's fp32 partials, the head's vocabulary slice), which the other ranks read.
   */
  public record State(LlamaFunction.State model, int rank, int ranks, BufferRef partialAttn, BufferRef partialMlp,
      BufferRef logitSlices) {

    public State {
      if (ranks < 2 || rank < 0 || rank >= ranks) {
        throw new IllegalArgumentException("rank " + rank + " of " + ranks + " is not a rank of a group");
      }
    }
  }

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  @Override
  public State init(FunctionSession session, JsonNode config) {
    throw new InvalidConfigException("a rank of a tensor-parallel Llama is built with its group "
        + "(LlamaTensorParallel.record), not alone");
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State state, FunctionRequest request) {
    throw new InvalidRequestException("rank " + state.rank() + " of " + state.ranks() + " of a tensor-parallel "
        + state.model().config().name() + " serves only with its group: restore the group's image");
  }
}
