package dev.thaw.examples.wait;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.InvalidConfigException;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.PtxResources;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Iterator;
import java.util.Locale;

/**
 * A function whose invoke lasts as long as its request says: one kernel that waits on the device, then the host
 * reads back how long it waited. It exists to measure what surrounds an invoke of a set length (the server's own
 * cost as the function's time grows, {@code ServerOverhead}); it computes nothing.
 *
 * <h2>Config</h2>
 * None: {@code {}} or absent.
 *
 * <h2>Device</h2>
 * {@code out}: 8 bytes. One kernel, {@code wait_ns} (see {@code wait.cu}), launched as one thread: it spins on
 * the GPU's global timer until {@code nanos} have passed and writes the nanoseconds it waited to {@code out}. The
 * sim device's twin waits the same time without burning a core (it parks, then spins its last stretch).
 *
 * <h2>Requests</h2>
 * {@code {"micros": N}}, N from 0 to {@link #MAX_MICROS}. The response is {@code {"micros": N, "deviceMicros":
 * W}}, W the time the kernel waited ({@code >= N}).
 */
public final class WaitFunction implements ThawFunction<WaitFunction.State> {

  /** One second: the longest wait a request may ask for. */
  public static final long MAX_MICROS = 1_000_000;

  static final String MODULE = "wait";
  static final String PTX_RESOURCE = "/dev/thaw/examples/wait/wait.ptx";
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

  /**
   * The host state.
   *
   * @param out where the kernel writes how long it waited
   * @param kernel the {@code wait_ns} kernel
   */
  public record State(BufferRef out, KernelRef kernel) {}

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  @Override
  public State init(FunctionSession session, JsonNode config) {
    if (config != null && !config.isNull() && !config.isMissingNode()
        && (!config.isObject() || config.size() > 0)) {
      throw new InvalidConfigException("the wait function takes no config, not " + config);
    }
    session.loadModule(MODULE, ptx());
    KernelRef wait = session.kernelRef(MODULE, WaitSimKernels.Wait.ENTRY);
    BufferRef out = session.allocate("out", 8);
    State state = new State(out, wait);
    invoke(session, state, FunctionRequest.of(NODES.objectNode().put("micros", 0)));
    return state;
  }

  @Override
  public void validate(State s, FunctionRequest request) {
    micros(request);
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request) {
    long micros = micros(request);
    session.launch(s.kernel(), Dim3.of(1), Dim3.of(1), micros * 1000, s.out());
    ByteBuffer host = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
    session.download(s.out(), 0, host);
    ObjectNode json = NODES.objectNode().put("micros", micros).put("deviceMicros", host.getLong(0) / 1e3);
    return FunctionResponse.of(json);
  }

  private static long micros(FunctionRequest request) {
    JsonNode json = request.json();
    if (!json.isObject() || request.binary().isPresent()) {
      throw new InvalidRequestException("the request must be a JSON object {\"micros\": N} and no raw bytes");
    }
    for (Iterator<String> names = json.fieldNames(); names.hasNext(); ) {
      String name = names.next();
      if (!name.equals("micros")) {
        throw new InvalidRequestException("unknown request key '" + name + "'; known: micros");
      }
    }
    JsonNode micros = json.get("micros");
    if (micros == null || !micros.isIntegralNumber() || !micros.canConvertToLong() || micros.longValue() < 0
        || micros.longValue() > MAX_MICROS) {
      throw new InvalidRequestException("'micros' must be an integer from 0 to " + MAX_MICROS + ", not "
          + (micros == null ? "missing" : micros.getNodeType().name().toLowerCase(Locale.ROOT) + " " + micros));
    }
    return micros.longValue();
  }

  public static String ptx() {
    return PtxResources.read(WaitFunction.class, PTX_RESOURCE);
  }
}
