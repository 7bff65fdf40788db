package dev.thaw.pool.hbm;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.HelperLink;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.Mapping;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.gpu.VirtualRange;
import dev.thaw.runtime.host.ProcessFds;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/**
 * Worker side, becoming an image whose read-only slabs another device's HBM tier holds (the node-wide tier): maps
 * those slabs, imported from their descriptors, at scratch addresses of this process, so that the restore copies every
 * allocation lying wholly in one over the peer link ({@link RestoreSource.Lease#peerCopy}) into the fresh slabs the
 * session maps at the recorded addresses, gated per allocation like any other copy. The rest of the image (written
 * buffers, a weight that runs into a written page) comes from the host cache as before.
 *
 * <p>Two ways to map them. Through a {@link HelperLink} from the slabs' own device ({@link #map(HelperLink, List)}):
 * imported and mapped on that device with access for it alone, a local mapping like the same device's tier makes; the
 * helper copies each run into the link's ring and the target pulls it. Or for the target itself ({@link
 * #map(GpuContext, List)}): mapped with access for this worker's device, which then reads another device's memory
 * directly; granting a device access to another's memory costs milliseconds per GB where a local mapping costs a
 * fraction of one (docs/design/memory-tiers.md), so that is the way without a link.
 *
 * <p>The other way, mapping the other device's slab at the recorded address itself (what {@link ResidentSlabs} does
 * for this device's tier), costs no copy but makes every kernel read its weights over NVLink; which one a cold start
 * takes is the placement's choice ({@code ColdStartPlacement}).
 *
 * <p>Keep it open until the restore is resident ({@code OnDemandRestore.resident()}): the copies read its mappings.
 */
public final class PeerSlabs implements AutoCloseable {

  private record Mapped(ExportedSlab slab, PhysicalMemory memory, VirtualRange range, Mapping mapping) {}

  private final List<Mapped> mapped;
  private final int sourceDevice;
  /** The link whose helper reads the mappings, or null when the target does. */
  private final HelperLink link;
  private final double mapMillis;
  /** Descriptors this object took ({@link #take}) and closes; none when the caller owns them. */
  private final List<ExportedSlab> owned;
  private boolean closed;

  private PeerSlabs(List<Mapped> mapped, int sourceDevice, HelperLink link, double mapMillis,
      List<ExportedSlab> owned) {
    this.mapped = mapped;
    this.sourceDevice = sourceDevice;
    this.link = link;
    this.mapMillis = mapMillis;
    this.owned = owned;
  }

  /**
   * Takes the server's descriptors into this process (one {@code pidfd_open}, a {@code pidfd_getfd} each), then
   * {@link #map(GpuContext, List)}s them for {@code context}; the descriptors taken are closed with this object.
   *
   * @throws IOException if the server is gone or this process may not take its descriptors
   */
  public static PeerSlabs take(GpuContext context, long serverPid, List<ExportedSlab> serverSlabs) throws IOException {
    List<ExportedSlab> mine = takeAll(serverPid, serverSlabs);
    try {
      return map(context, null, mine, mine);
    } catch (RuntimeException e) {
      HbmExport.close(mine);
      throw e;
    }
  }

  /**
   * Takes the server's descriptors into this process, then {@link #map(HelperLink, List)}s them on {@code link}'s
   * helper; the descriptors taken are closed with this object.
   *
   * @throws IOException if the server is gone or this process may not take its descriptors
   */
  public static PeerSlabs take(HelperLink link, long serverPid, List<ExportedSlab> serverSlabs) throws IOException {
    List<ExportedSlab> mine = takeAll(serverPid, serverSlabs);
    try {
      return map(link.helper(), link, mine, mine);
    } catch (RuntimeException e) {
      HbmExport.close(mine);
      throw e;
    }
  }

  private static List<ExportedSlab> takeAll(long serverPid, List<ExportedSlab> serverSlabs) throws IOException {
    int[] theirs = new int[serverSlabs.size()];
    for (int i = 0; i < theirs.length; i++) {
      theirs[i] = serverSlabs.get(i).fd();
    }
    int[] fds = ProcessFds.takeAll(serverPid, theirs);
    List<ExportedSlab> mine = new ArrayList<>(fds.length);
    for (int i = 0; i < fds.length; i++) {
      mine.add(serverSlabs.get(i).withFd(fds[i]));
    }
    return mine;
  }

  /**
   * Imports each slab's memory ({@code cuMemImportFromShareableHandle}), maps it at a scratch address and grants this
   * context's device read access ({@code cuMemSetAccess}: a peer mapping when the memory is another device's). The
   * descriptors stay the caller's.
   *
   * @throws IllegalArgumentException if the slabs overlap, or lie on more than one device
   * @throws dev.thaw.runtime.gpu.CudaException if a descriptor is not exported device memory, or this device cannot
   *     reach the device it lives on
   */
  public static PeerSlabs map(GpuContext context, List<ExportedSlab> slabs) {
    return map(context, null, slabs, List.of());
  }

  /**
   * Imports each slab's memory on {@code link}'s helper, the device it lives on, and maps it at a scratch address with
   * read access for that device alone: the restore reads it through the link ({@link RestoreSource.Lease#peerLink}).
   * The descriptors stay the caller's.
   *
   * @throws IllegalArgumentException if the slabs overlap, or do not all lie on the link's helper device
   * @throws dev.thaw.runtime.gpu.CudaException if a descriptor is not exported device memory
   */
  public static PeerSlabs map(HelperLink link, List<ExportedSlab> slabs) {
    return map(link.helper(), link, slabs, List.of());
  }

  /** Maps the slabs for {@code context}'s device; with {@code link}, {@code context} is its helper. */
  private static PeerSlabs map(GpuContext context, HelperLink link, List<ExportedSlab> slabs,
      List<ExportedSlab> owned) {
    List<ExportedSlab> sorted = new ArrayList<>(slabs);
    sorted.sort(Comparator.comparingLong(ExportedSlab::address));
    for (int i = 1; i < sorted.size(); i++) {
      ExportedSlab before = sorted.get(i - 1);
      if (before.address() + before.size() > sorted.get(i).address()) {
        throw new IllegalArgumentException("slabs overlap: " + before.encode() + " and " + sorted.get(i).encode());
      }
    }
    long t0 = System.nanoTime();
    List<Mapped> out = new ArrayList<>(sorted.size());
    int device = -1;
    try {
      for (ExportedSlab s : sorted) {
        PhysicalMemory memory = context.importMemory(s.fd(), s.size());
        VirtualRange range = null;
        try {
          if (device >= 0 && memory.deviceOrdinal() != device) {
            throw new IllegalArgumentException("the slabs lie on devices " + device + " and " + memory.deviceOrdinal());
          }
          if (link != null && memory.deviceOrdinal() != context.device().ordinal()) {
            throw new IllegalArgumentException("a slab lies on device " + memory.deviceOrdinal() + ", not on device "
                + context.device().ordinal() + " whose link would relay it");
          }
          device = memory.deviceOrdinal();
          range = context.reserveScratch(s.size());
          Mapping mapping = range.map(0, memory);
          mapping.setAccess(MemoryAccess.READ);
          out.add(new Mapped(s, memory, range, mapping));
        } catch (RuntimeException e) {
          if (range != null) {
            range.close();
          }
          memory.close();
          throw e;
        }
      }
    } catch (RuntimeException e) {
      out.forEach(PeerSlabs::unmap);
      throw e;
    }
    return new PeerSlabs(out, device, link, (System.nanoTime() - t0) / 1e6, owned);
  }

  /** The device the slabs' memory lives on; -1 when there are none. */
  public int sourceDevice() {
    return sourceDevice;
  }

  /** Bytes the slabs hold. */
  public long bytes() {
    return mapped.stream().mapToLong(m -> m.slab().size()).sum();
  }

  /** Time spent importing, mapping and granting access. */
  public double mapMillis() {
    return mapMillis;
  }

  /** The link whose helper reads the slabs and relays their bytes, or null when the target reads them itself. */
  public HelperLink link() {
    return link;
  }

  /**
   * Where {@code allocation}'s bytes lie in another device's memory, mapped here for the target or for the link's
   * helper ({@link #link}): 0 unless one slab holds all.
   */
  public long peerCopy(ImageManifest.Allocation allocation) {
    long start = allocation.address();
    long end = start + allocation.size();
    int lo = 0;
    int hi = mapped.size() - 1;
    while (lo <= hi) {
      int mid = (lo + hi) >>> 1;
      ExportedSlab s = mapped.get(mid).slab();
      if (s.address() + s.size() <= start) {
        lo = mid + 1;
      } else if (s.address() > start) {
        hi = mid - 1;
      } else {
        return end <= s.address() + s.size() ? mapped.get(mid).range().address() + (start - s.address()) : 0;
      }
    }
    return 0;
  }

  /** {@code inner} (the host cache, say), with this object's slabs as the source of every allocation they hold. */
  public RestoreSource over(RestoreSource inner) {
    return manifest -> {
      RestoreSource.Lease lease = inner.lease(manifest);
      return new RestoreSource.Lease() {
        @Override
        public RestoreSource.HostChunk find(Digest digest) {
          return lease.find(digest);
        }

        @Override
        public boolean resident(ImageManifest.Allocation allocation) {
          return lease.resident(allocation);
        }

        @Override
        public List<long[]> residentRanges() {
          return lease.residentRanges();
        }

        @Override
        public long peerCopy(ImageManifest.Allocation allocation) {
          return PeerSlabs.this.peerCopy(allocation);
        }

        @Override
        public HelperLink peerLink() {
          return link;
        }

        @Override
        public void close() {
          lease.close();
        }
      };
    };
  }

  private static void unmap(Mapped m) {
    m.mapping().close();
    m.range().close();
    m.memory().close();
  }

  /** Unmaps the slabs here (their memory stays while the tier holds its descriptors) and closes what was taken. */
  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    mapped.forEach(PeerSlabs::unmap);
    HbmExport.close(owned);
  }
}
