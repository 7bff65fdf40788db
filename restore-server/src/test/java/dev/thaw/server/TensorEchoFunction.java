package dev.thaw.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.FunctionSignature;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.TensorSpec;
import dev.thaw.runtime.function.ThawFunction;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * A function that declares a tensor of several datatypes and answers with each as it came, plus {@code rows}, the
 * rows of {@code floats} (a scalar): what the KServe v2 API makes of tensors shows in its answer. It takes tensors with
 * no elements. {@code "ragged": true} makes it answer a ragged {@code floats}; {@code "refuse": true} refuses.
 * It keeps a counter in device memory, so every request goes to the device.
 */
public final class TensorEchoFunction implements ThawFunction<TensorEchoFunction.State> {

  public static final List<TensorSpec> TENSORS = List.of(TensorSpec.of("floats", "FP32", -1, 2),
      TensorSpec.of("halves", "FP16", -1), TensorSpec.of("flags", "BOOL", -1), TensorSpec.of("words", "BYTES", -1),
      TensorSpec.of("big", "UINT64", -1), TensorSpec.of("small", "INT8", -1));

  public record State(BufferRef counter) {}

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  @Override
  public State init(FunctionSession session, JsonNode config) {
    BufferRef counter = session.allocate("counter", 4096);
    session.upload(counter, 0, ByteBuffer.allocateDirect(8));
    return new State(counter);
  }

  @Override
  public FunctionSignature signature(State state) {
    List<TensorSpec> outputs = new ArrayList<>(TENSORS);
    outputs.add(TensorSpec.of("rows", "INT64"));
    return new FunctionSignature(TENSORS, outputs, Optional.empty());
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request) {
    JsonNode json = request.json();
    if (json.path("refuse").asBoolean(false)) {
      throw new InvalidRequestException("refused, as asked");
    }
    ByteBuffer b = ByteBuffer.allocateDirect(8);
    session.download(s.counter(), 0, b);
    b.putLong(0, b.getLong(0) + 1);
    session.upload(s.counter(), 0, b);
    ObjectNode out = JsonNodeFactory.instance.objectNode();
    for (TensorSpec t : TENSORS) {
      out.set(t.name(), json.get(t.name()));
    }
    out.put("rows", json.path("floats").size());
    if (json.path("ragged").asBoolean(false)) {
      out.putArray("floats").add(out.arrayNode().add(1.0)).add(out.arrayNode().add(1.0).add(2.0));
    }
    return FunctionResponse.of(out);
  }
}
