package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.KernelParam;
import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.gpu.ParamType;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * One launch as a {@link SimKernel} sees it: its dimensions, its arguments and device memory.
 *
 * <p>Arguments are read by parameter index from a copy of the launch's parameter bytes, taken when the launch
 * was submitted. Each reader checks the parameter's width (and its type, when the layout has types; a module
 * loaded from a cubin has only sizes): a mismatch is an {@link IllegalArgumentException}, which fails the
 * launch with {@code CUDA_ERROR_LAUNCH_FAILED}. Pointers are {@code .u64} parameters: read them with
 * {@link #pointer} and use the address with {@link #memory()}.
 */
public final class SimLaunch {

  private final String kernelName;
  private final Dim3 grid;
  private final Dim3 block;
  private final int sharedMemBytes;
  private final ParamLayout params;
  private final ByteBuffer args;
  private final DeviceMemory memory;

  SimLaunch(String kernelName, Dim3 grid, Dim3 block, int sharedMemBytes, ParamLayout params, byte[] args,
      DeviceMemory memory) {
    this.kernelName = kernelName;
    this.grid = grid;
    this.block = block;
    this.sharedMemBytes = sharedMemBytes;
    this.params = params;
    this.args = ByteBuffer.wrap(args).order(ByteOrder.LITTLE_ENDIAN);
    this.memory = memory;
  }

  /** The {@code .entry} name. */
  public String kernelName() {
    return kernelName;
  }

  public Dim3 grid() {
    return grid;
  }

  public Dim3 block() {
    return block;
  }

  /** Threads in the whole launch: {@code grid.total() * block.total()}. */
  public long threadCount() {
    return grid.total() * block.total();
  }

  /** Dynamic shared memory asked for; a Java kernel has no shared memory, but may size scratch arrays by it. */
  public int sharedMemBytes() {
    return sharedMemBytes;
  }

  public ParamLayout params() {
    return params;
  }

  /** The checked, recording view of device memory. Valid during {@link SimKernel#launch} only. */
  public DeviceMemory memory() {
    return memory;
  }

  /** A {@code .u64} pointer parameter: a device address. */
  public long pointer(int index) {
    return args.getLong(at(index, ParamType.INT64, 8));
  }

  /** A {@code .u64}/{@code .s64}/{@code .b64} parameter. */
  public long longArg(int index) {
    return args.getLong(at(index, ParamType.INT64, 8));
  }

  public int intArg(int index) {
    return args.getInt(at(index, ParamType.INT32, 4));
  }

  public float floatArg(int index) {
    return args.getFloat(at(index, ParamType.FLOAT32, 4));
  }

  public double doubleArg(int index) {
    return args.getDouble(at(index, ParamType.FLOAT64, 8));
  }

  /** A 16-bit parameter ({@code .u16}, {@code .f16}, ... as raw bits). */
  public short shortArg(int index) {
    return args.getShort(at(index, ParamType.INT16, 2));
  }

  public byte byteArg(int index) {
    return args.get(at(index, ParamType.INT8, 1));
  }

  /** A struct parameter's bytes (a copy), little-endian as on the device. */
  public byte[] bytesArg(int index) {
    KernelParam p = param(index);
    if (p.type() != ParamType.BYTES && p.type() != ParamType.UNTYPED) {
      throw new IllegalArgumentException("parameter " + p.describe() + " is not a struct parameter");
    }
    byte[] out = new byte[p.size()];
    args.get(p.offset(), out);
    return out;
  }

  private int at(int index, ParamType type, int width) {
    KernelParam p = param(index);
    if (p.size() != width || (p.type() != type && p.type() != ParamType.UNTYPED)) {
      throw new IllegalArgumentException("kernel " + kernelName + ": parameter " + p.describe()
          + " cannot be read as " + type);
    }
    return p.offset();
  }

  private KernelParam param(int index) {
    if (index < 0 || index >= params.count()) {
      throw new IllegalArgumentException("kernel " + kernelName + " takes " + params.count()
          + " parameters; no parameter " + index);
    }
    return params.get(index);
  }
}
