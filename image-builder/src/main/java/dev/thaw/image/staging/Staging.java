package dev.thaw.image.staging;


/**
 * The defaults and limits of the pinned staging ({@link StagingRing}) that builds and restores stream device memory
 * through: one set for both, so a build's options and a restore's check their staging alike.
 */
public final class Staging {

  /** Buffers in flight: one being copied while the others are hashed or read. */
  public static final int DEFAULT_BUFFERS = 6;
  public static final long DEFAULT_BYTES = 64L << 20;
  /** Hash or read threads: the host's cores, up to 16. */
  public static final int DEFAULT_THREADS = Math.max(1, Math.min(16, Runtime.getRuntime().availableProcessors()));

  private Staging() {}

  /** @throws IllegalArgumentException unless 2 to 64 buffers */
  public static int checkBuffers(int count) {
    if (count < 2 || count > 64) {
      throw new IllegalArgumentException("staging buffers must be 2 to 64, not " + count);
    }
    return count;
  }

  /** @throws IllegalArgumentException unless 4 KiB to 1 GiB */
  public static long checkBytes(long bytes) {
    if (bytes < 4096 || bytes > (1L << 30)) {
      throw new IllegalArgumentException("a staging buffer must be 4 KiB to 1 GiB, not " + bytes + " bytes");
    }
    return bytes;
  }

  /** @throws IllegalArgumentException unless 1 to 256 threads; {@code what} names them in the message */
  public static int checkThreads(int threads, String what) {
    if (threads < 1 || threads > 256) {
      throw new IllegalArgumentException(what + " threads must be 1 to 256, not " + threads);
    }
    return threads;
  }
}
