package dev.thaw.runtime.gpu;

/**
 * A stream: work submitted to it runs in order, asynchronously to the host. Created non-blocking, so it
 * orders against other streams only through events ({@link #waitFor}).
 *
 * <p>Host-side arguments are checked before anything is submitted: an offset or length outside a pinned
 * buffer is an {@link IllegalArgumentException}.
 */
public interface GpuStream extends AutoCloseable {

  GpuContext context();

  void copyHostToDeviceAsync(long dstDevice, PinnedBuffer src, long srcOffset, long bytes);

  void copyDeviceToHostAsync(PinnedBuffer dst, long dstOffset, long srcDevice, long bytes);

  void copyDeviceToDeviceAsync(long dstDevice, long srcDevice, long bytes);

  /**
   * Copies {@code bytes} from {@code srcDevice}, memory of {@code srcContext}'s device, to {@code dstDevice}, memory
   * of {@code dstContext}'s device ({@code cuMemcpyPeerAsync}). Over NVLink when the devices are peers; the driver
   * stages through the host otherwise. {@link #copyDeviceToDeviceAsync} does the same through unified addressing
   * when this stream's device has {@linkplain Mapping#setAccessFor access} to both ranges.
   */
  void copyPeerAsync(long dstDevice, GpuContext dstContext, long srcDevice, GpuContext srcContext, long bytes);

  void memsetD8Async(long dstDevice, byte value, long bytes);

  void memsetD32Async(long dstDevice, int value, long count);

  /** Records {@code event} at this point of the stream; same as {@code event.record(this)}. */
  default void record(GpuEvent event) {
    event.record(this);
  }

  /** Makes later work on this stream wait until {@code event}'s most recent record has completed. */
  void waitFor(GpuEvent event);

  /** True when all work submitted so far has completed ({@code cuStreamQuery}); never blocks. */
  boolean isIdle();

  /** Blocks until all work submitted so far has completed. */
  void synchronize();

  /** Destroys the stream once its work is done. Idempotent. */
  @Override
  void close();
}
