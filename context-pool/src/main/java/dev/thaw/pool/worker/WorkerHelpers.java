package dev.thaw.pool.worker;

import dev.thaw.image.restore.HelperLink;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * The links of other devices this worker lends its one restore (multi-link restore, {@link HelperLink}): made after
 * READY on a thread of their own ({@link #openAll}), a context on each of {@link WorkerConfig#helperLinks()} other
 * devices and a link to each usable one; a device that would not do is said on stderr with the reason and left
 * alone. A BECOME takes the open links of the devices it names ({@link #lend}), and the link from the device whose
 * HBM tier it pulls from ({@link #relay}); one still opening is not waited for.
 * Once the restore is resident the worker {@link #close}s them all: it restores once in its life, and the helper
 * devices get their memory (the ring, the context) back.
 *
 * <p>Thread-safe: opened on one thread, lent on the executing one, closed on whichever saw the restore complete.
 */
final class WorkerHelpers implements AutoCloseable {

  private record Helper(GpuContext context, HelperLink link) {}

  private final GpuDriver driver;
  private final GpuContext target;
  private final WorkerConfig config;
  private final long pid = ProcessHandle.current().pid();
  /** Open links by helper device, in ordinal order. */
  private final Map<Integer, Helper> open = new LinkedHashMap<>();
  private boolean closed;

  WorkerHelpers(GpuDriver driver, GpuContext target, WorkerConfig config) {
    this.driver = driver;
    this.target = target;
    this.config = config;
  }

  /**
   * Links like these, none open yet: what a recycled worker opens again, its first restore having closed these (an
   * instance holds nothing on other devices).
   */
  WorkerHelpers fresh() {
    return new WorkerHelpers(driver, target, config);
  }

  synchronized boolean isClosed() {
    return closed;
  }

  /** The devices a worker on {@code own} opens links to: the lowest other ordinals, at most {@code links}. */
  static List<Integer> candidates(List<DeviceInfo> devices, int own, int links) {
    List<Integer> out = new ArrayList<>();
    for (DeviceInfo d : devices) {
      if (out.size() < links && d.ordinal() != own) {
        out.add(d.ordinal());
      }
    }
    return out;
  }

  private HelperLink.Options options() {
    long slot = config.helperSlotBytes();
    return new HelperLink.Options().slotBytes(slot).minFreeBytes(config.helperMinFreeBytes())
        .measureBytes(Math.min(HelperLink.DEFAULT_MEASURE_BYTES, slot));
  }

  /**
   * Opens a link to each candidate device that can lend one; returns the devices whose link is open. Stops early once
   * {@link #close} was called.
   */
  List<Integer> openAll() {
    HelperLink.Options options = options();
    for (int device : candidates(driver.devices(), target.device().ordinal(), config.helperLinks())) {
      synchronized (this) {
        if (closed) {
          break;
        }
      }
      GpuContext context = null;
      try {
        context = driver.createContext(device);
        Optional<String> why = HelperLink.whyUnusable(target, context, options);
        if (why.isPresent()) {
          System.err.println("worker " + pid + ": no helper link to device " + device + ": " + why.get());
          context.close();
          continue;
        }
        HelperLink link = HelperLink.open(target, context, options);
        boolean kept;
        synchronized (this) {
          kept = !closed;
          if (kept) {
            open.put(device, new Helper(context, link));
          }
        }
        if (!kept) {
          link.close();
          context.close();
          break;
        }
        System.err.println("worker " + pid + ": " + link);
      } catch (RuntimeException e) {
        // A device this worker cannot use (another process holds it exclusively, it ran out of memory): the restore
        // goes through the links that opened.
        System.err.println("worker " + pid + ": no helper link to device " + device + ": " + e);
        if (context != null) {
          try {
            context.close();
          } catch (RuntimeException suppressed) {
            // Said above.
          }
        }
      }
    }
    synchronized (this) {
      return List.copyOf(open.keySet());
    }
  }

  /** The devices whose link is open, in ordinal order. */
  synchronized List<Integer> devices() {
    return List.copyOf(open.keySet());
  }

  /**
   * The open links of {@code devices}, in their order; a named device without one is skipped. No driver call: lending
   * allocates nothing on the lender (its ring was made at open, where {@link WorkerConfig#helperMinFreeBytes()} was
   * asked), whether it may lend is the owner's choice (it knows what runs there), and a query of the lender's memory on
   * the cold path waits behind whatever another process does to that device (a worker exiting there).
   */
  synchronized List<HelperLink> lend(List<Integer> devices) {
    List<HelperLink> out = new ArrayList<>();
    if (closed) {
      return out;
    }
    for (int device : devices) {
      Helper h = open.get(device);
      if (h != null) {
        out.add(h.link());
      }
    }
    return out;
  }

  /**
   * The open link from {@code device}, to relay that device's own memory (its HBM tier's slabs) to this worker's
   * restore, or null when there is none. Unlike {@link #lend}, no free memory is asked of the device: the relay reads
   * memory it holds already, through the ring it holds already.
   */
  synchronized HelperLink relay(int device) {
    Helper h = closed ? null : open.get(device);
    return h == null ? null : h.link();
  }

  /**
   * The context this worker opened on {@code device} for its link, no longer this object's: the link is closed and the
   * caller owns the context (a group's rank runs in it); null when no link to that device is open.
   */
  GpuContext take(int device) {
    Helper h;
    synchronized (this) {
      h = closed ? null : open.remove(device);
    }
    if (h == null) {
      return null;
    }
    try {
      h.link().close();
    } catch (RuntimeException e) {
      h.context().close();
      throw e;
    }
    return h.context();
  }

  /** Closes every link and its context; one {@link #openAll} is still making is closed as it finishes. Idempotent. */
  @Override
  public void close() {
    List<Helper> all;
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
      all = new ArrayList<>(open.values());
      open.clear();
    }
    for (Helper h : all) {
      try {
        h.link().close();
      } finally {
        h.context().close();
      }
    }
  }
}
