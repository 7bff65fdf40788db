package dev.thaw.bench.restore;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.ThawFunction;

/**
 * The function of a {@link SyntheticImage}: no state, no kernels, an empty answer. Its image is only bytes, which the
 * multi-link harness restores and checks itself; {@code init} never runs (the image is made, not built).
 */
public final class SyntheticWeightsFunction implements ThawFunction<SyntheticWeightsFunction.State> {

  public record State() {}

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  @Override
  public State init(FunctionSession session, JsonNode config) {
    return new State();
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State state, FunctionRequest request) {
    return FunctionResponse.of(JsonNodeFactory.instance.objectNode());
  }
}
