package dev.thaw.examples.function;

import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.function.Consumer;

/**
 * One context and stream on one driver for kernel tests, with upload and download of plain arrays. Subclasses add
 * the kernels they load and close them in {@link #closeKernels()}.
 */
public abstract class KernelTestDevice implements AutoCloseable {

  public final GpuDriver driver;
  public final GpuContext context;
  public final GpuStream stream;
  private final List<DeviceBuffer> buffers = new ArrayList<>();

  protected KernelTestDevice(GpuDriver driver) {
    this.driver = driver;
    this.context = driver.createContext(0);
    this.stream = context.createStream();
  }

  /** The buffers uploaded since the last {@link #freeBuffers}. */
  public List<DeviceBuffer> buffers() {
    return Collections.unmodifiableList(buffers);
  }

  public String name() {
    return driver.name();
  }

  public long upload(short[] a) {
    ByteBuffer b = direct(2L * a.length);
    b.asShortBuffer().put(a);
    return upload(b);
  }

  public long upload(float[] a) {
    ByteBuffer b = direct(4L * a.length);
    b.asFloatBuffer().put(a);
    return upload(b);
  }

  public long upload(int[] a) {
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
  public short[] halves(long address, int n) {
    ByteBuffer b = download(address, 2L * n);
    short[] out = new short[n];
    b.asShortBuffer().get(out);
    return out;
  }

  public float[] floats(long address, int n) {
    ByteBuffer b = download(address, 4L * n);
    float[] out = new float[n];
    b.asFloatBuffer().get(out);
    return out;
  }

  public int[] ints(long address, int n) {
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

  /**
   * Median of 20 launches of {@code launch} on this device's stream, each timed by CUDA events, after 3
   * unmeasured ones.
   */
  public double medianMs(Consumer<GpuStream> launch) {
    try (GpuEvent start = context.createEvent(); GpuEvent end = context.createEvent()) {
      for (int i = 0; i < 3; i++) {
        launch.accept(stream);
      }
      double[] t = new double[20];
      for (int i = 0; i < t.length; i++) {
        start.record(stream);
        launch.accept(stream);
        end.record(stream);
        end.synchronize();
        t[i] = end.elapsedMillisSince(start);
      }
      Arrays.sort(t);
      return (t[9] + t[10]) / 2;
    }
  }

  /** Frees what earlier cases uploaded. */
  public void freeBuffers() {
    stream.synchronize();
    for (DeviceBuffer b : buffers) {
      b.close();
    }
    buffers.clear();
  }

  /** Unloads the subclass's kernels; called by {@link #close()} after the buffers are freed. */
  protected abstract void closeKernels();

  @Override
  public void close() {
    try {
      freeBuffers();
    } finally {
      try {
        closeKernels();
      } finally {
        stream.close();
        context.close();
      }
    }
  }
}
