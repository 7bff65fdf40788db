package dev.thaw.runtime.ptx.instrument;

import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.KernelParam;
import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.gpu.ParamType;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Map;

/**
 * Launches an instrumented kernel with a plain kernel's arguments and a set of allowed ranges, waits, and
 * returns the violations. Keeps one {@link DeviceGuard} and one argument slab per kernel between launches.
 *
 * <p>Synchronous by design (validation runs at image build, never on the serving path): each launch
 * synchronizes {@code stream} before it rewrites the table and after the kernel. Not thread-safe.
 */
public final class ValidatingLauncher implements AutoCloseable {

  private final GpuContext context;
  private final Map<Kernel, KernelArgs> slabs = new HashMap<>();
  private DeviceGuard guard;

  public ValidatingLauncher(GpuContext context) {
    this.context = context;
  }

  /**
   * Launches {@code instrumented} with {@code originalArgs} plus the guard table of {@code allowed}.
   *
   * @throws IllegalArgumentException if the instrumented kernel's layout is not {@code originalArgs}' layout
   *     plus one trailing {@code .u64}, or an argument is unset
   */
  public ViolationReport launch(Kernel instrumented, Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream,
      KernelArgs originalArgs, GuardTable allowed) {
    checkLayouts(originalArgs.layout(), instrumented.params(), instrumented.name());
    originalArgs.checkComplete();
    KernelArgs args = slabs.computeIfAbsent(instrumented, Kernel::newArgs);
    copy(originalArgs, args);
    stream.synchronize();
    if (guard == null) {
      guard = DeviceGuard.upload(context, allowed);
    } else {
      guard.load(allowed);
    }
    args.set(originalArgs.layout().count(), guard.address());
    // The plain kernel's launcher raised its own limit; the instrumented twin is another function.
    if (sharedMemBytes > Kernel.DEFAULT_MAX_DYNAMIC_SHARED_MEMORY) {
      instrumented.setMaxDynamicSharedMemory(sharedMemBytes);
    }
    instrumented.launch(grid, block, sharedMemBytes, stream, args);
    stream.synchronize();
    return guard.read();
  }

  /**
   * The plain kernel's layout as the instrumented one implies it: every parameter but the last.
   *
   * @throws IllegalArgumentException if the last parameter is not a {@code .u64}
   */
  public static ParamLayout originalLayout(ParamLayout instrumented, String kernel) {
    int n = instrumented.count();
    if (n == 0 || instrumented.get(n - 1).type() != ParamType.INT64) {
      throw new IllegalArgumentException("kernel " + kernel + " does not end in the guard's .u64 parameter: "
          + instrumented.params());
    }
    int total = 0;
    for (int i = 0; i < n - 1; i++) {
      KernelParam p = instrumented.get(i);
      total = Math.max(total, p.offset() + p.size());
    }
    return new ParamLayout(instrumented.params().subList(0, n - 1), total);
  }

  /**
   * Checks that {@code instrumented} is {@code original} plus one trailing {@code .u64}: same count plus one,
   * and the same offset, size and type for each original parameter (any type for an untyped one: a kernel loaded
   * from a cubin knows only its parameters' offsets and sizes).
   *
   * @throws IllegalArgumentException naming the first difference
   */
  public static void checkLayouts(ParamLayout original, ParamLayout instrumented, String kernel) {
    if (instrumented.count() != original.count() + 1) {
      throw new IllegalArgumentException("instrumented kernel " + kernel + " takes " + instrumented.count()
          + " parameters; expected the original " + original.count() + " plus the guard");
    }
    for (int i = 0; i < original.count(); i++) {
      KernelParam o = original.get(i);
      KernelParam p = instrumented.get(i);
      if (o.offset() != p.offset() || o.size() != p.size()
          || (o.type() != p.type() && o.type() != ParamType.UNTYPED)) {
        throw new IllegalArgumentException("instrumented kernel " + kernel + ": parameter " + i + " is "
            + p.describe() + ", the original's is " + o.describe());
      }
    }
    KernelParam g = instrumented.get(original.count());
    if (g.type() != ParamType.INT64 || g.size() != 8) {
      throw new IllegalArgumentException("instrumented kernel " + kernel + ": the last parameter " + g.describe()
          + " is not the guard's .u64");
    }
  }

  /**
   * Copies every parameter of {@code from} into the same index of {@code to}, by type; an untyped one (from a cubin)
   * by the type {@code to} gives it, the bytes unchanged.
   */
  static void copy(KernelArgs from, KernelArgs to) {
    ByteBuffer s = from.slab();
    ParamLayout layout = from.layout();
    for (int i = 0; i < layout.count(); i++) {
      KernelParam p = layout.get(i);
      int at = p.offset();
      ParamType type = p.type();
      if (type == ParamType.UNTYPED) {
        ParamType target = to.layout().get(i).type();
        type = target == ParamType.UNTYPED ? untyped(p.size()) : target;
      }
      switch (type) {
        case INT8 -> to.set(i, s.get(at));
        case INT16 -> to.set(i, s.getShort(at));
        case INT32 -> to.set(i, s.getInt(at));
        case INT64 -> to.set(i, s.getLong(at));
        case FLOAT32 -> to.set(i, s.getFloat(at));
        case FLOAT64 -> to.set(i, s.getDouble(at));
        default -> {
          byte[] bytes = new byte[p.size()];
          s.get(at, bytes);
          to.set(i, bytes);
        }
      }
    }
  }

  private static ParamType untyped(int size) {
    return switch (size) {
      case 1 -> ParamType.INT8;
      case 2 -> ParamType.INT16;
      case 4 -> ParamType.INT32;
      case 8 -> ParamType.INT64;
      default -> ParamType.BYTES;
    };
  }

  /** Frees the guard table. Idempotent. */
  @Override
  public void close() {
    if (guard != null) {
      guard.close();
      guard = null;
    }
  }
}
