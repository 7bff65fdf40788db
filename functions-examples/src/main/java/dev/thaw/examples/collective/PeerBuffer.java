package dev.thaw.examples.collective;

import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.MemoryAccess;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * One buffer per rank of a {@link PeerGroup}, each in its own rank's device memory, read-write for its own device and
 * readable by every other rank's ({@code cuMemSetAccess} with the peer's location): what a rank writes its partial
 * into and its peers read. Each rank's buffer is a VMM allocation of its own, so a peer is granted exactly these
 * bytes and nothing else of its rank's memory.
 */
public final class PeerBuffer implements AutoCloseable {

  private final String name;
  private final long bytes;
  private final List<DeviceBuffer> buffers;
  private final long[] addresses;
  private final AtomicBoolean closed = new AtomicBoolean();

  private PeerBuffer(String name, long bytes, List<DeviceBuffer> buffers) {
    this(name, bytes, buffers, buffers.stream().mapToLong(DeviceBuffer::address).toArray());
  }

  private PeerBuffer(String name, long bytes, List<DeviceBuffer> buffers, long[] addresses) {
    this.name = name;
    this.bytes = bytes;
    this.buffers = List.copyOf(buffers);
    this.addresses = addresses;
  }

  /** {@code bytes} on each context's device, each granted {@link MemoryAccess#READ} to the other contexts' devices. */
  static PeerBuffer allocate(String name, long bytes, List<GpuContext> ranks) {
    if (bytes <= 0) {
      throw new IllegalArgumentException("peer buffer '" + name + "' needs a positive size, not " + bytes);
    }
    List<DeviceBuffer> made = new ArrayList<>();
    try {
      for (GpuContext own : ranks) {
        DeviceBuffer b = own.allocate(bytes);
        made.add(b);
        for (GpuContext peer : ranks) {
          if (peer != own) {
            b.setAccessFor(peer.device().ordinal(), MemoryAccess.READ);
          }
        }
      }
      return new PeerBuffer(name, bytes, made);
    } catch (RuntimeException e) {
      for (DeviceBuffer b : made) {
        b.close();
      }
      throw e;
    }
  }

  /**
   * Every rank's buffer of {@code bytes} at {@code addresses} (by rank), allocated and granted to the other ranks'
   * devices by their owner (a function session's buffers, whose slabs the owner maps and frees): closing the view
   * frees nothing.
   */
  public static PeerBuffer over(String name, long bytes, long[] addresses) {
    if (bytes <= 0) {
      throw new IllegalArgumentException("peer buffer '" + name + "' needs a positive size, not " + bytes);
    }
    for (long a : addresses) {
      if (a == 0) {
        throw new IllegalArgumentException("peer buffer '" + name + "' has a null address");
      }
    }
    return new PeerBuffer(name, bytes, List.of(), addresses.clone());
  }

  public String name() {
    return name;
  }

  /** The size of each rank's buffer. */
  public long bytes() {
    return bytes;
  }

  public int ranks() {
    return addresses.length;
  }

  /** Rank {@code rank}'s buffer's device address. */
  public long address(int rank) {
    checkOpen();
    return addresses[rank];
  }

  /** Every rank's address, by rank: shared, never to be written. */
  long[] addresses() {
    checkOpen();
    return addresses;
  }

  private void checkOpen() {
    if (closed.get()) {
      throw new IllegalStateException("peer buffer '" + name + "' is closed");
    }
  }

  /** Frees every rank's buffer; the caller has synchronized every rank's stream. Idempotent. */
  @Override
  public void close() {
    if (closed.compareAndSet(false, true)) {
      for (DeviceBuffer b : buffers) {
        b.close();
      }
    }
  }

  @Override
  public String toString() {
    return "PeerBuffer[" + name + ", " + ranks() + " x " + bytes + " bytes]";
  }
}
