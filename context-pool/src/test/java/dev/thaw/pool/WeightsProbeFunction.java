package dev.thaw.pool;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.ThawFunction;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

/**
 * A function whose answer proves its image landed byte for byte: {@code buffers} weights of {@code bytes} bytes each
 * (seeded random bytes, uploaded at init), and requests ({@code op}): {@code digest} (each weight's SHA-256, read
 * through the session, whose downloads an on-demand restore gates: the build's sample answer is what the bytes were
 * then) and {@code sleep} ({@code millis} on the host, a request that keeps its device busy).
 */
public final class WeightsProbeFunction implements ThawFunction<WeightsProbeFunction.State> {

  public record State(List<BufferRef> weights, long bytes) {}

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  @Override
  public State init(FunctionSession session, JsonNode config) {
    int n = config.path("buffers").asInt(8);
    long bytes = config.path("bytes").asLong(1 << 20);
    SplittableRandom random = new SplittableRandom(config.path("seed").asLong(1));
    List<BufferRef> weights = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      BufferRef w = session.allocate("w." + i, bytes);
      ByteBuffer b = ByteBuffer.allocateDirect((int) bytes);
      while (b.remaining() >= 8) {
        b.putLong(random.nextLong());
      }
      b.clear();
      session.upload(w, 0, b);
      weights.add(w);
    }
    return new State(weights, bytes);
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request) throws Exception {
    ObjectNode out = JsonNodeFactory.instance.objectNode();
    switch (request.json().path("op").asText()) {
      case "digest" -> {
        ArrayNode digests = out.putArray("digests");
        ByteBuffer b = ByteBuffer.allocateDirect((int) s.bytes());
        for (BufferRef w : s.weights()) {
          b.clear();
          session.download(w, 0, b);
          b.clear();
          digests.add(Digest.of(b).toString());
        }
      }
      case "sleep" -> {
        long millis = request.json().path("millis").asLong();
        Thread.sleep(millis);
        out.put("slept", millis);
      }
      default -> throw new InvalidRequestException("unknown op '" + request.json().path("op").asText() + "'");
    }
    return FunctionResponse.of(out);
  }
}
