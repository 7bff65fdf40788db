package dev.thaw.runtime.gpu;

import com.sun.jna.Memory;
import com.sun.jna.Pointer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * A reusable, off-heap parameter buffer for one kernel's launches.
 *
 * <p>Values are checked against the kernel's {@link ParamLayout} as they are set, so a mistake surfaces as
 * an {@link IllegalArgumentException} here, never as a driver error or a corrupt launch. The slab is laid
 * out exactly as the device expects it; {@link #pointerArrayAddress()} is the {@code void**} array that
 * {@code cuLaunchKernel} takes, built once.
 *
 * <p>Not thread-safe: each launching thread uses its own.
 */
public final class KernelArgs {

  private final ParamLayout layout;
  private final Memory memory;
  private final ByteBuffer slab;
  private final long pointerArrayAddress;
  private final boolean[] set;
  private int unset;

  public KernelArgs(ParamLayout layout) {
    this.layout = layout;
    int slabBytes = (Math.max(layout.totalSize(), 1) + 7) & ~7;
    int n = layout.count();
    this.memory = new Memory(slabBytes + 8L * Math.max(n, 1));
    memory.clear();
    this.slab = memory.getByteBuffer(0, slabBytes).order(ByteOrder.LITTLE_ENDIAN);
    long base = Pointer.nativeValue(memory);
    this.pointerArrayAddress = base + slabBytes;
    for (int i = 0; i < n; i++) {
      memory.setLong(slabBytes + 8L * i, base + layout.get(i).offset());
    }
    this.set = new boolean[n];
    this.unset = n;
  }

  public ParamLayout layout() {
    return layout;
  }

  public KernelArgs set(int index, int value) {
    put(index, ParamType.INT32, 4, Integer.class).putInt(offset(index), value);
    return this;
  }

  public KernelArgs set(int index, long value) {
    put(index, ParamType.INT64, 8, Long.class).putLong(offset(index), value);
    return this;
  }

  public KernelArgs set(int index, DeviceBuffer buffer) {
    return set(index, buffer.address());
  }

  public KernelArgs set(int index, float value) {
    put(index, ParamType.FLOAT32, 4, Float.class).putFloat(offset(index), value);
    return this;
  }

  public KernelArgs set(int index, double value) {
    put(index, ParamType.FLOAT64, 8, Double.class).putDouble(offset(index), value);
    return this;
  }

  public KernelArgs set(int index, short value) {
    put(index, ParamType.INT16, 2, Short.class).putShort(offset(index), value);
    return this;
  }

  public KernelArgs set(int index, byte value) {
    put(index, ParamType.INT8, 1, Byte.class).put(offset(index), value);
    return this;
  }

  /** A struct parameter, passed by value: exactly the parameter's size in bytes. */
  public KernelArgs set(int index, byte[] bytes) {
    KernelParam p = param(index);
    if (p.type() != ParamType.BYTES && p.type() != ParamType.UNTYPED) {
      throw wrongType(p, "byte[]");
    }
    if (bytes.length != p.size()) {
      throw new IllegalArgumentException("parameter " + p.describe() + " takes " + p.size()
          + " bytes, got " + bytes.length);
    }
    slab.put(p.offset(), bytes);
    markSet(index);
    return this;
  }

  /**
   * Sets every parameter from typed values, in order.
   *
   * @throws IllegalArgumentException if the count differs from the layout's or a value has the wrong type
   */
  public KernelArgs setAll(Object... values) {
    if (values.length != layout.count()) {
      throw new IllegalArgumentException("kernel takes " + layout.count() + " arguments, got " + values.length);
    }
    for (int i = 0; i < values.length; i++) {
      setObject(i, values[i]);
    }
    return this;
  }

  private void setObject(int i, Object v) {
    if (v instanceof Integer x) {
      set(i, (int) x);
    } else if (v instanceof Long x) {
      set(i, (long) x);
    } else if (v instanceof DeviceBuffer x) {
      set(i, x);
    } else if (v instanceof Float x) {
      set(i, (float) x);
    } else if (v instanceof Double x) {
      set(i, (double) x);
    } else if (v instanceof Short x) {
      set(i, (short) x);
    } else if (v instanceof Byte x) {
      set(i, (byte) x);
    } else if (v instanceof byte[] x) {
      set(i, x);
    } else {
      throw wrongType(param(i), v == null ? "null" : v.getClass().getSimpleName());
    }
  }

  /**
   * Checks that every parameter was set.
   *
   * @throws IllegalArgumentException naming the first one that was not
   */
  public void checkComplete() {
    if (unset != 0) {
      for (int i = 0; i < set.length; i++) {
        if (!set[i]) {
          throw new IllegalArgumentException("parameter " + layout.get(i).describe() + " was not set");
        }
      }
    }
  }

  /** The parameter bytes, little-endian, laid out as on the device. A view: do not keep it past a launch. */
  public ByteBuffer slab() {
    return slab;
  }

  /** The host address of the parameter bytes. */
  public long slabAddress() {
    return Pointer.nativeValue(memory);
  }

  /** The host address of the {@code void*[count]} array whose entries point at each parameter in the slab. */
  public long pointerArrayAddress() {
    return pointerArrayAddress;
  }

  private int offset(int index) {
    return layout.get(index).offset();
  }

  private KernelParam param(int index) {
    if (index < 0 || index >= layout.count()) {
      throw new IllegalArgumentException("kernel takes " + layout.count() + " arguments; no parameter " + index);
    }
    return layout.get(index);
  }

  private ByteBuffer put(int index, ParamType type, int width, Class<?> javaType) {
    KernelParam p = param(index);
    boolean ok = p.type() == type || (p.type() == ParamType.UNTYPED && p.size() == width);
    if (!ok) {
      throw wrongType(p, javaType.getSimpleName());
    }
    markSet(index);
    return slab;
  }

  private void markSet(int index) {
    if (!set[index]) {
      set[index] = true;
      unset--;
    }
  }

  private static IllegalArgumentException wrongType(KernelParam p, String given) {
    return new IllegalArgumentException("parameter " + p.describe() + " cannot take a " + given);
  }
}
