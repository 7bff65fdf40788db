package dev.thaw.examples.llama.kernels;

import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.function.BiFunction;

/** One context on one driver with the Llama kernels loaded for both 16-bit types, and array upload/download. */
final class LlamaDevice implements AutoCloseable {

  final GpuDriver driver;
  final GpuContext context;
  final GpuStream stream;
  private final LlamaKernels bf16;
  private final LlamaKernels fp16;
  private final List<DeviceBuffer> buffers = new ArrayList<>();

  LlamaDevice(GpuDriver driver) {
    this(driver, LlamaKernels::load);
  }

  /** With kernels of the caller's making, e.g. from an instrumented module. */
  LlamaDevice(GpuDriver driver, BiFunction<GpuContext, HalfType, LlamaKernels> kernels) {
    this.driver = driver;
    this.context = driver.createContext(0);
    this.stream = context.createStream();
    this.bf16 = kernels.apply(context, HalfType.BF16);
    this.fp16 = new LlamaKernels(bf16.module(), HalfType.FP16);
  }

  LlamaKernels kernels(HalfType type) {
    return type == HalfType.BF16 ? bf16 : fp16;
  }

  long upload(short[] a) {
    ByteBuffer b = direct(2L * a.length);
    b.asShortBuffer().put(a);
    return upload(b);
  }

  long upload(float[] a) {
    ByteBuffer b = direct(4L * a.length);
    b.asFloatBuffer().put(a);
    return upload(b);
  }

  long upload(int[] a) {
    ByteBuffer b = direct(4L * a.length);
    b.asIntBuffer().put(a);
    return upload(b);
  }

  private long upload(ByteBuffer b) {
    DeviceBuffer buffer = context.allocate(Math.max(b.capacity(), 1));
    buffers.add(buffer);
    buffer.copyFromHost(b);
    return buffer.address();
  }

  /** Waits for the stream, then reads. */
  short[] halves(long address, int n) {
    ByteBuffer b = download(address, 2L * n);
    short[] out = new short[n];
    b.asShortBuffer().get(out);
    return out;
  }

  float[] floats(long address, int n) {
    ByteBuffer b = download(address, 4L * n);
    float[] out = new float[n];
    b.asFloatBuffer().get(out);
    return out;
  }

  int[] ints(long address, int n) {
    ByteBuffer b = download(address, 4L * n);
    int[] out = new int[n];
    b.asIntBuffer().get(out);
    return out;
  }

  private ByteBuffer download(long address, long bytes) {
    stream.synchronize();
    ByteBuffer b = direct(bytes);
    context.copyDeviceToHost(b, address);
    return b;
  }

  private static ByteBuffer direct(long bytes) {
    return ByteBuffer.allocateDirect(Math.toIntExact(bytes)).order(ByteOrder.LITTLE_ENDIAN);
  }

  /** Frees what earlier cases uploaded. */
  void freeBuffers() {
    stream.synchronize();
    for (DeviceBuffer b : buffers) {
      b.close();
    }
    buffers.clear();
  }

  @Override
  public void close() {
    try {
      freeBuffers();
    } finally {
      bf16.close();
      stream.close();
      context.close();
    }
  }
}
