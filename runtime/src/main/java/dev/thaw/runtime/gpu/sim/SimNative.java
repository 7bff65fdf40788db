package dev.thaw.runtime.gpu.sim;

import com.sun.jna.Native;
import com.sun.jna.Platform;
import java.lang.reflect.Field;
import sun.misc.Unsafe;

/**
 * Raw host memory for the simulated device: {@code calloc}/{@code free} from the C library through JNA
 * direct mapping (large blocks come back as untouched zero pages, so a 16 GiB device costs nothing until
 * written), and {@link Unsafe} for loads and stores. Every caller checks bounds first; nothing here does.
 */
final class SimNative {

  static final Unsafe U;
  static final long BYTE_BASE;
  static final long SHORT_BASE;
  static final long INT_BASE;
  static final long FLOAT_BASE;

  static {
    try {
      Field f = Unsafe.class.getDeclaredField("theUnsafe");
      f.setAccessible(true);
      U = (Unsafe) f.get(null);
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
    BYTE_BASE = U.arrayBaseOffset(byte[].class);
    SHORT_BASE = U.arrayBaseOffset(short[].class);
    INT_BASE = U.arrayBaseOffset(int[].class);
    FLOAT_BASE = U.arrayBaseOffset(float[].class);
    Native.register(SimNative.class, Platform.C_LIBRARY_NAME);
  }

  private SimNative() {}

  static native long calloc(long count, long size);

  static native void free(long address);

  /** Zeroed memory, or 0 when the host cannot provide it. */
  static long allocateZeroed(long bytes) {
    return calloc(1, bytes);
  }
}
