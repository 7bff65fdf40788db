package dev.thaw.runtime.function;

import dev.thaw.runtime.gpu.GpuStream;
import java.nio.ByteBuffer;

/**
 * A {@link LaunchInterceptor} that also sees the device work a {@link FunctionSession} issues itself: uploads,
 * downloads, device-to-device copies and fills. On-demand restore gates these as it gates launches: none may touch
 * device bytes before they are restored.
 *
 * <p>When the session's interceptor is one, {@link FunctionSession#upload} first offers the upload to
 * {@link #uploadInstead}, and {@link FunctionSession#download}, {@link FunctionSession#copy} and
 * {@link FunctionSession#fill} call {@link #beforeDeviceAccess} for each device range before they queue or do
 * anything. Runs on the calling thread; must not block it on device work.
 */
public interface CopyInterceptor extends LaunchInterceptor {

  /**
   * Called before the session's own work touches {@code [address, address + bytes)} on {@code stream} (a download
   * synchronizes {@code stream} right after): may make {@code stream} wait.
   */
  void beforeDeviceAccess(long address, long bytes, GpuStream stream);

  /**
   * Offered every upload of {@code src.remaining()} bytes to {@code dstDevice} before the session copies it
   * synchronously. Returning true means the interceptor took it: it copied {@code src}'s bytes (the caller may reuse
   * {@code src} at once) and queued the upload on {@code stream}, where every later work of the stream sees it.
   * Returning false lets the session copy synchronously as usual.
   */
  boolean uploadInstead(long dstDevice, ByteBuffer src, GpuStream stream);
}
