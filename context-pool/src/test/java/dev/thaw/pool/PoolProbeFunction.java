package dev.thaw.pool;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.check.CheckKernels;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * A function for the pool's tests, on either device: one buffer {@code secret} of {@code bytes} bytes (not a
 * multiple of the 2 MiB granularity, so its mapping has a tail the image never writes) filled with 0x5A at init,
 * and requests that misbehave on purpose ({@code op}): {@code echo}, {@code fill} (the whole mapped span and
 * {@code extraBytes} of fresh memory, with {@code value}), {@code scan} (count bytes another tenant could have
 * left: in the tail and in {@code extraBytes} of fresh memory), {@code hang}, {@code exit}, {@code print},
 * {@code garbage} (raw bytes on the process's stdout), {@code oob} (a kernel writing past the mapping),
 * (with packed allocations, "the mapping" is the slab that holds {@code secret}: its tail past the image's
 * buffers is never written by a restore),
 * {@code alloc}, {@code bad}, {@code fail}, {@code sleep} ({@code millis} on the host), {@code touch} (rewrites the
 * first bytes of {@code secret} through the session: an image profiled with it calls {@code secret} written, so its
 * slab stays writable after a restore, and a {@code fill} can dirty it; profiled with {@code echo} only, {@code secret}
 * is read-only and a {@code fill} is refused once the worker has protected it), {@code access} (the access of
 * {@code secret}'s slab at the request's start and end, with a read of {@code secret} and a hold of {@code holdMillis}
 * between), {@code stream} ({@code parts} parts {@code {"n": i}}, one every {@code everyMillis}, then a wait of up to
 * {@code holdMillis} that a cancel ends; answers how many parts it sent and whether it was cancelled).
 */
public final class PoolProbeFunction implements ThawFunction<PoolProbeFunction.State> {

  public static final byte PATTERN = 0x5A;
  /** 1.5 MiB + 100: a 2 MiB mapping with a tail of 524188 bytes. */
  public static final long DEFAULT_BYTES = (3L << 19) + 100;

  /** Memory a {@code fill} leaves allocated until the process exits, as a careless tenant would. */
  private static final List<DeviceBuffer> LEFT_BEHIND = new ArrayList<>();

  public record State(long bytes, BufferRef secret, KernelRef fill) {}

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  @Override
  public State init(FunctionSession session, JsonNode config) {
    long bytes = config.path("bytes").asLong(DEFAULT_BYTES);
    session.loadModule("check", CheckKernels.ptx());
    BufferRef secret = session.allocate("secret", bytes);
    session.context().memsetD8(session.address(secret), PATTERN, bytes);
    return new State(bytes, secret, session.kernelRef("check", CheckKernels.FILL_U32));
  }

  /** The access of the session's slab that holds {@code address}: READ, READ_WRITE, or none (no slab). */
  private static String slabAccess(FunctionSession session, long address) {
    for (FunctionSession.MappedSlab m : session.slabs()) {
      if (address >= m.slab().address() && address < m.slab().end()) {
        return String.valueOf(m.mapping().access());
      }
    }
    return "none";
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request, ResponseStream stream)
      throws Exception {
    JsonNode r = request.json();
    if (!r.path("op").asText().equals("stream")) {
      return invoke(session, s, request);
    }
    int parts = r.path("parts").asInt(1);
    int sent = 0;
    for (; sent < parts && !stream.cancelled(); sent++) {
      stream.part(JsonNodeFactory.instance.objectNode().put("n", sent));
      Thread.sleep(r.path("everyMillis").asLong(0));
    }
    long until = System.nanoTime() + r.path("holdMillis").asLong(0) * 1_000_000;
    while (!stream.cancelled() && System.nanoTime() < until) {
      Thread.sleep(1);
    }
    return FunctionResponse.of(JsonNodeFactory.instance.objectNode().put("parts", sent)
        .put("cancelled", stream.cancelled()));
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request) throws Exception {
    JsonNode r = request.json();
    ObjectNode out = JsonNodeFactory.instance.objectNode();
    GpuContext ctx = session.context();
    long address = session.address(s.secret());
    long span = mappedEnd(session, address) - address;
    switch (r.path("op").asText()) {
      case "echo" -> out.put("pid", ProcessHandle.current().pid()).set("echo", r.path("value"));
      case "fill" -> {
        byte v = (byte) r.path("value").asInt(0xAB);
        ctx.memsetD8(address, v, span);
        long extra = r.path("extraBytes").asLong(0);
        if (extra > 0) {
          DeviceBuffer b = ctx.allocate(extra);
          ctx.memsetD8(b.address(), v, b.mappedSize());
          LEFT_BEHIND.add(b);
        }
        ctx.synchronize();
        out.put("filled", span).put("extra", extra).put("address", address);
      }
      case "scan" -> {
        ByteBuffer all = ByteBuffer.allocateDirect((int) span);
        ctx.copyDeviceToHost(all, address);
        long headMismatches = 0;
        long tailNonZero = 0;
        for (int i = 0; i < span; i++) {
          byte b = all.get(i);
          if (i < s.bytes()) {
            headMismatches += b != PATTERN ? 1 : 0;
          } else {
            tailNonZero += b != 0 ? 1 : 0;
          }
        }
        long extra = r.path("extraBytes").asLong(0);
        long extraNonZero = 0;
        if (extra > 0) {
          try (DeviceBuffer b = ctx.allocate(extra)) {
            ByteBuffer chunk = ByteBuffer.allocateDirect(1 << 20);
            for (long off = 0; off < b.mappedSize(); off += chunk.capacity()) {
              chunk.clear().limit((int) Math.min(chunk.capacity(), b.mappedSize() - off));
              ctx.copyDeviceToHost(chunk, b.address() + off);
              for (int i = 0; i < chunk.limit(); i++) {
                extraNonZero += chunk.get(i) != 0 ? 1 : 0;
              }
            }
          }
        }
        out.put("address", address).put("headMismatches", headMismatches)
            .put("tailBytes", span - s.bytes()).put("tailNonZero", tailNonZero).put("extraBytes", extra)
            .put("extraNonZero", extraNonZero);
      }
      case "sleep" -> {
        Thread.sleep(r.path("millis").asLong());
        out.put("slept", r.path("millis").asLong());
      }
      case "hang" -> Thread.sleep(Long.MAX_VALUE);
      case "exit" -> Runtime.getRuntime().halt(r.path("status").asInt(9));
      case "print" -> {
        System.out.println("a function printing to stdout must not break the protocol");
        out.put("printed", true);
      }
      case "garbage" -> {
        FileOutputStream raw = new FileOutputStream(FileDescriptor.out);
        raw.write("this is not a frame\n".getBytes(StandardCharsets.US_ASCII));
        raw.flush();
        Thread.sleep(Long.MAX_VALUE);
      }
      case "oob" -> {
        // Grid-stride fill of 8 MiB from the start of a 2 MiB mapping: writes far past it.
        session.launch(s.fill(), Dim3.of(64), Dim3.of(256), s.secret(), 7, (int) ((span + (6L << 20)) / 4));
        session.synchronize();
        out.put("survived", true);
      }
      case "alloc" -> {
        try (DeviceBuffer b = ctx.allocate(r.path("bytes").asLong())) {
          out.put("allocated", b.mappedSize());
        }
      }
      case "touch" -> {
        ByteBuffer same = ByteBuffer.allocateDirect(4);
        for (int i = 0; i < 4; i++) {
          same.put(i, PATTERN);
        }
        session.upload(s.secret(), 0, same);
        out.put("touched", 4);
      }
      case "access" -> {
        // The access of secret's slab when the request starts and when it ends: a protection applied while a request
        // runs shows as a change. In between, a read of secret through the session (on demand, it waits for the
        // copy) and a hold of holdMillis, during which a restore in the background completes.
        String before = slabAccess(session, address);
        session.download(s.secret(), 0, ByteBuffer.allocateDirect(4));
        long hold = r.path("holdMillis").asLong(0);
        if (hold > 0) {
          Thread.sleep(hold);
        }
        out.put("pid", ProcessHandle.current().pid()).put("before", before).put("after", slabAccess(session, address));
      }
      case "bad" -> throw new InvalidRequestException("this request is bad on purpose");
      case "fail" -> throw new IllegalStateException("this function fails on purpose");
      default -> throw new InvalidRequestException("unknown op '" + r.path("op").asText() + "'");
    }
    return FunctionResponse.of(out);
  }

  /** The end of the mapping that holds {@code address}: a slab of a packed session, or the buffer's own. */
  static long mappedEnd(FunctionSession session, long address) {
    for (FunctionSession.MappedSlab m : session.slabs()) {
      if (address >= m.slab().address() && address < m.slab().address() + m.slab().size()) {
        return m.slab().address() + m.slab().size();
      }
    }
    throw new IllegalStateException(String.format("no slab maps 0x%x", address));
  }
}
