package dev.thaw.examples.probe;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
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
import java.util.Set;

/**
 * A function that reads device memory wherever its caller says, with no bounds check (and writes it, when asked): it
 * exists to prove fault isolation and the write protection of read-only weights. One request with an offset far outside its buffer makes its kernel fault with
 * {@code CUDA_ERROR_ILLEGAL_ADDRESS}, a sticky error that poisons its process's CUDA context for good; the server
 * must answer that request with a clean error, replace the instance's worker, and go on serving every other
 * function as if nothing happened. Never deploy it for anything else.
 *
 * <h2>Config</h2>
 * {@code {"elements": 65536, "maxCount": 1024}}, each key optional: the buffer's length in floats (at most
 * {@link #MAX_ELEMENTS}) and the most values one request may read (at most {@link #MAX_COUNT}).
 *
 * <h2>Device</h2>
 * {@code values}: {@code elements} float32, {@code values[i] = i} (exact: {@code elements <= 2^24}), uploaded at
 * init; {@code out}: {@code maxCount} float32. Two kernels (see {@code probe.cu}): {@code probe_read}, thread
 * {@code t < count} copies {@code values[offset + t]} to {@code out[t]}, with 64-bit index arithmetic; and
 * {@code probe_write}, thread {@code t < count} stores a value to {@code values[offset + t]}.
 *
 * <h2>Requests</h2>
 * {@code {"offset": O, "count": C}}: C values (1 to {@code maxCount}) from element O on; O is any signed 64-bit
 * integer and is not checked against the buffer, on purpose. The response is {@code {"offset": O, "count": C,
 * "values": [...]}}; inside the buffer, {@code values[j] == O + j}. With {@code "fill": V} (a number) the request
 * first stores V to those C elements ({@code probe_write}), then reads them back. A profile built from requests
 * without {@code fill} sees {@code values} only read: the image calls it read-only, the restore write-protects its
 * pages, and a {@code fill} into them faults ({@code CUDA_ERROR_ILLEGAL_ADDRESS}) while one into {@code out}
 * (offsets from {@code elements} on, where {@code out} follows {@code values}) is served.
 *
 * <p>Where an offset leads: inside {@code [0, elements)} the buffer's values; a little past it, whatever else of
 * the image is mapped there (the mapping's tail, {@code out}): garbage, but no fault, on a GPU as on the sim
 * device. {@link #FAULT_OFFSET} (256 GiB past the buffer) lands in the device address arena every Thaw process
 * reserves (1 TiB, see {@code DeviceAddressArena}) but where nothing is mapped: an illegal address on a GPU and on
 * the sim device alike. The fault surfaces as a {@code CudaException} with code 700 when the values are
 * downloaded.
 */
public final class MemoryProbeFunction implements ThawFunction<MemoryProbeFunction.State> {

  public static final int DEFAULT_ELEMENTS = 1 << 16;
  public static final int DEFAULT_MAX_COUNT = 1024;
  /** Floats stay exact integers up to 2^24. */
  public static final int MAX_ELEMENTS = 1 << 24;
  public static final int MAX_COUNT = 1 << 20;
  /**
   * An offset (in elements) that faults: 256 GiB past the buffer, inside the 1 TiB address arena the process has
   * reserved but not mapped there.
   */
  public static final long FAULT_OFFSET = 1L << 36;
  /** Threads per block of {@code probe_read}. */
  public static final int THREADS = 256;

  static final String MODULE = "probe";
  static final String PTX_RESOURCE = "/dev/thaw/examples/probe/probe.ptx";
  private static final Set<String> CONFIG_KEYS = Set.of("elements", "maxCount");
  private static final Set<String> REQUEST_KEYS = Set.of("offset", "count", "fill");
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

  /**
   * The host state.
   *
   * @param elements floats in {@code values}
   * @param maxCount floats in {@code out}: the most one request reads
   * @param values the probed buffer, {@code values[i] = i}
   * @param out where the kernel puts what it read
   * @param read the {@code probe_read} kernel
   * @param write the {@code probe_write} kernel
   */
  public record State(int elements, int maxCount, BufferRef values, BufferRef out, KernelRef read, KernelRef write) {}

  /** A checked request; {@code fill} null when it only reads. */
  private record Probe(long offset, int count, Float fill) {}

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  @Override
  public State init(FunctionSession session, JsonNode config) {
    int elements = intConfig(config, "elements", DEFAULT_ELEMENTS, MAX_ELEMENTS);
    int maxCount = intConfig(config, "maxCount", DEFAULT_MAX_COUNT, MAX_COUNT);
    session.loadModule(MODULE, ptx());
    KernelRef read = session.kernelRef(MODULE, ProbeSimKernels.Read.ENTRY);
    KernelRef write = session.kernelRef(MODULE, ProbeSimKernels.Write.ENTRY);
    BufferRef values = session.allocate("values", 4L * elements);
    BufferRef out = session.allocate("out", 4L * maxCount);
    ByteBuffer host = ByteBuffer.allocateDirect(4 * elements).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < elements; i++) {
      host.putFloat(i);
    }
    host.flip();
    session.upload(values, 0, host);
    State state = new State(elements, maxCount, values, out, read, write);
    ObjectNode warmUp = NODES.objectNode().put("offset", 0).put("count", 1);
    invoke(session, state, FunctionRequest.of(warmUp));
    return state;
  }

  @Override
  public void validate(State s, FunctionRequest request) {
    probe(s, request);
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request) {
    Probe p = probe(s, request);
    if (p.fill() != null) {
      session.launch(s.write(), Dim3.of((p.count() + THREADS - 1) / THREADS), Dim3.of(THREADS), s.values(),
          p.offset(), p.count(), p.fill().floatValue());
    }
    session.launch(s.read(), Dim3.of((p.count() + THREADS - 1) / THREADS), Dim3.of(THREADS), s.values(),
        p.offset(), p.count(), s.out());
    ByteBuffer host = ByteBuffer.allocateDirect(4 * p.count()).order(ByteOrder.LITTLE_ENDIAN);
    // Where a fault surfaces: the download waits for the launch, and a poisoned context throws here.
    session.download(s.out(), 0, host);
    ObjectNode json = NODES.objectNode().put("offset", p.offset()).put("count", p.count());
    ArrayNode values = json.putArray("values");
    for (int i = 0; i < p.count(); i++) {
      values.add(host.getFloat(4 * i));
    }
    return FunctionResponse.of(json);
  }

  /** The request's offset and count; the count is checked against {@code out}, the offset not at all. */
  private static Probe probe(State s, FunctionRequest request) {
    JsonNode json = request.json();
    if (!json.isObject()) {
      throw new InvalidRequestException("the request must be a JSON object {\"offset\": O, \"count\": C}, not "
          + kind(json));
    }
    if (request.binary().isPresent()) {
      throw new InvalidRequestException("the probe takes no raw bytes, only {\"offset\": O, \"count\": C}");
    }
    for (Iterator<String> names = json.fieldNames(); names.hasNext(); ) {
      String name = names.next();
      if (!REQUEST_KEYS.contains(name)) {
        throw new InvalidRequestException("unknown request key '" + name + "'; known: offset, count, fill");
      }
    }
    JsonNode offset = json.get("offset");
    if (offset == null || !offset.isIntegralNumber() || !offset.canConvertToLong()) {
      throw new InvalidRequestException("'offset' must be an integer (an element index, any signed 64-bit value), "
          + "not " + (offset == null ? "missing" : kind(offset) + " " + offset));
    }
    JsonNode count = json.get("count");
    if (count == null || !count.isIntegralNumber() || !count.canConvertToInt()) {
      throw new InvalidRequestException("'count' must be an integer, not "
          + (count == null ? "missing" : kind(count) + " " + count));
    }
    int c = count.intValue();
    if (c < 1 || c > s.maxCount()) {
      throw new InvalidRequestException("'count' is " + c + "; a request reads 1 to " + s.maxCount() + " values");
    }
    JsonNode fill = json.get("fill");
    if (fill != null && !fill.isNumber()) {
      throw new InvalidRequestException("'fill' must be a number (the value to store), not " + kind(fill));
    }
    return new Probe(offset.longValue(), c, fill == null ? null : fill.floatValue());
  }

  private static int intConfig(JsonNode config, String key, int defaultValue, int max) {
    if (config == null || config.isNull() || config.isMissingNode()) {
      return defaultValue;
    }
    if (!config.isObject()) {
      throw new InvalidConfigException("the probe config must be a JSON object, not " + kind(config));
    }
    for (Iterator<String> names = config.fieldNames(); names.hasNext(); ) {
      String name = names.next();
      if (!CONFIG_KEYS.contains(name)) {
        throw new InvalidConfigException("unknown probe config key '" + name + "'; known: elements, maxCount");
      }
    }
    JsonNode node = config.get(key);
    if (node == null) {
      return defaultValue;
    }
    if (!node.isIntegralNumber() || !node.canConvertToInt() || node.intValue() < 1 || node.intValue() > max) {
      throw new InvalidConfigException("'" + key + "' must be an integer from 1 to " + max + ", not " + node);
    }
    return node.intValue();
  }

  private static String kind(JsonNode node) {
    return node.getNodeType().name().toLowerCase(Locale.ROOT);
  }

  public static String ptx() {
    return PtxResources.read(MemoryProbeFunction.class, PTX_RESOURCE);
  }
}
