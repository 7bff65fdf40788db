package dev.thaw.examples.gpt2.kernels;

import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;

/** One context on one driver with the GPT-2 kernels loaded, and upload/download of plain arrays. */
final class Gpt2Device implements AutoCloseable {

  final GpuDriver driver;
  final GpuContext context;
  final GpuStream stream;
  final Gpt2Kernels kernels;
  private final List<DeviceBuffer> buffers = new ArrayList<>();

  Gpt2Device(GpuDriver driver) {
    this(driver, Gpt2Kernels::load);
  }

  /** With kernels of the caller's making, e.g. from an instrumented module. */
  Gpt2Device(GpuDriver driver, java.util.function.Function<GpuContext, Gpt2Kernels> kernels) {
    this.driver = driver;
    this.context = driver.createContext(0);
    this.stream = context.createStream();
    this.kernels = kernels.apply(context);
  }

  /** The buffers uploaded since the last {@link #freeBuffers}. */
  List<DeviceBuffer> buffers() {
    return java.util.Collections.unmodifiableList(buffers);
  }

  String name() {
    return driver.name();
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
      kernels.close();
      stream.close();
      context.close();
    }
  }
}
