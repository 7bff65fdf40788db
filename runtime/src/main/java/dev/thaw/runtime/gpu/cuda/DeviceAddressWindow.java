package dev.thaw.runtime.gpu.cuda;

import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongPredicate;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Where this process puts device ranges whose caller names no address.
 *
 * <p>With unified addressing a device range also occupies host virtual addresses, so where the driver puts a
 * range depends on the process's host mappings: measured on an H200, a busy JVM got {@code 0x7f8380800000}
 * and a second JVM could not reserve it, because its own mappings were there. Thaw therefore places ranges in
 * a window far above anything the JVM, libc or the driver map (first free base of {@link #CANDIDATE_BASES}).
 * Every Thaw process probes the same candidates in the same order, so a range reserved in one process can
 * be reserved at the same address in another: what same-address restore needs.
 *
 * <p>The window only hands out hints; ranges are never reused, and 16 TiB of addresses outlast any process.
 */
final class DeviceAddressWindow {

  private static final Logger LOG = LoggerFactory.getLogger(DeviceAddressWindow.class);

  /** 32, 48 and 64 TiB: inside the 47-bit user address space, far from the heap, the libraries and the stacks. */
  static final long[] CANDIDATE_BASES = {0x2000_0000_0000L, 0x3000_0000_0000L, 0x4000_0000_0000L};

  private final long base;
  private final AtomicLong next;

  private DeviceAddressWindow(long base) {
    this.base = base;
    this.next = new AtomicLong(base);
  }

  /**
   * Picks the first candidate base that {@code reservable} accepts (it should try to reserve the address
   * exactly and release it); with none, hands out no hints and leaves placement to the driver.
   */
  static DeviceAddressWindow probe(LongPredicate reservable) {
    for (long candidate : CANDIDATE_BASES) {
      if (reservable.test(candidate)) {
        LOG.debug("device address window at 0x{}", Long.toHexString(candidate));
        return new DeviceAddressWindow(candidate);
      }
    }
    LOG.warn("no device address window is free; the driver places ranges, so they may not be reservable"
        + " at the same address in another process");
    return new DeviceAddressWindow(0);
  }

  /** The window's first address, or 0 when there is none. */
  long base() {
    return base;
  }

  /** A hint for a range of {@code size} bytes ({@code size} a multiple of {@code alignment}); 0 without a window. */
  long nextHint(long size, long alignment) {
    if (base == 0) {
      return 0;
    }
    long start = next.getAndUpdate(n -> alignUp(n, alignment) + size);
    return alignUp(start, alignment);
  }

  private static long alignUp(long n, long alignment) {
    return (n + alignment - 1) / alignment * alignment;
  }
}
