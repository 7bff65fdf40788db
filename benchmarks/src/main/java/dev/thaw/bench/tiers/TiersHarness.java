package dev.thaw.bench.tiers;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.BuildResult;
import dev.thaw.image.build.FastCdcChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.cache.CachedChunk;
import dev.thaw.pool.cache.CoalescedCopies;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostCacheView;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.pool.cache.PinnedChunks;
import dev.thaw.pool.cache.RestoreOrder;
import dev.thaw.pool.hbm.ExportedSlab;
import dev.thaw.pool.hbm.HbmExport;
import dev.thaw.pool.hbm.ResidentSlabs;
import dev.thaw.runtime.function.AllocationRecord;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.MapPlan;
import dev.thaw.runtime.function.SessionTable;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Mapping;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.gpu.VirtualRange;
import dev.thaw.runtime.host.ProcessFds;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;

/**
 * The memory tiers measured on one device, for the MLP and GPT-2-large: registration of the host cache, store →
 * cache staging, map time of an image packed and per-buffer (as before packing, mapped the old way and the new
 * way), cache → device copies (coalesced as laid out, and chunk by chunk), and the HBM tier (export, then import
 * and map read-only). Every image is built first into a fresh store under {@code dir}.
 *
 * <p>Run: {@code java -cp <classpath> dev.thaw.bench.tiers.TiersHarness [dir] [models]} with {@code models} a
 * comma list of {@code mlp}, {@code gpt2}, {@code gpt2-large} (default {@code mlp,gpt2-large}); {@code THAW_DEVICE}
 * picks the device, {@code THAW_TIERS_CACHE_GIB} the cache size (default 4). Results are lines of
 * {@code name: value}; nothing here is a pass/fail check but the byte comparisons, which exit non-zero.
 */
public final class TiersHarness {

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final int REPEATS = 7;

  private TiersHarness() {}

  public static void main(String[] args) throws Exception {
    Path root = args.length > 0 ? Path.of(args[0]) : Files.createTempDirectory("thaw-tiers");
    List<String> models = List.of((args.length > 1 ? args[1] : "mlp,gpt2-large").split(","));
    long cacheBytes = (long) (Double.parseDouble(System.getenv().getOrDefault("THAW_TIERS_CACHE_GIB", "4")) * (1L << 30));
    boolean ok = true;
    try (GpuDriver driver = GpuDrivers.open(); GpuContext ctx = driver.createContext(0);
        RocksChunkStore store = RocksChunkStore.open(root.resolve("store"));
        HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(cacheBytes))) {
      System.out.printf("device: %s (%s)%n", ctx.device().describe(), driver.isSimulated() ? "SIMULATED: no GPU numbers"
          : "cuda " + driver.driverVersion());
      long t0 = System.nanoTime();
      try (HostCacheView view = HostCacheView.attach(cache.path(), ctx)) {
        System.out.printf("host-register: %.1f ms for %.2f GiB (map + cuMemHostRegister %.1f ms), read-only=%s%n",
            ms(t0), cache.capacity() / (double) (1L << 30), view.registerMillis(), view.isReadOnly());
        for (String model : models) {
          ok &= measure(model, ctx, store, cache, view);
        }
      }
    }
    System.out.println(ok ? "result: all byte checks passed" : "result: A BYTE CHECK FAILED");
    System.exit(ok ? 0 : 1);
  }

  private static boolean measure(String model, GpuContext ctx, RocksChunkStore store, HostImageCache cache,
      HostCacheView view) throws Exception {
    String p = model + ".";
    long t0 = System.nanoTime();
    BuildResult built = new ImageBuilder(store, new FastCdcChunker()).build(buildOptions(model), ctx,
        ProgressListener.NONE);
    ImageManifest m = built.manifest();
    SessionTable packed = new SessionTable(m.sessionTable(Map.of()).allocations(), List.of());
    Set<String> readOnly = m.readOnlyAllocations();
    long roBytes = m.allocations().stream().filter(a -> readOnly.contains(a.name())).mapToLong(a -> a.size()).sum();
    System.out.printf("%sbuild: %.1f s, %d allocations, %.1f MB, %d chunks, profile %s, read-only %d allocations "
        + "(%.1f MB)%n", p, ms(t0) / 1e3, m.allocations().size(), m.totalBytes() / 1e6, m.chunkDigests().size(),
        m.profile().summary(), readOnly.size(), roBytes / 1e6);

    try (CacheLease lease = cache.stage(model, m, store)) {
      System.out.printf("%sstore->cache: %.1f MB in %.1f ms = %.2f GB/s (read + SHA-256 on %d threads), %d runs%n",
          p, lease.stagedBytes() / 1e6, lease.stageMillis(), lease.stagedBytes() / 1e6 / lease.stageMillis(),
          cache.options().stagingThreads(), lease.placement().runs());
      PinnedChunks chunks = view.chunks(lease.placement());
      mapTimes(p, ctx, packed);
      boolean ok = cacheToDevice(p, ctx, m, packed, chunks);
      ok &= hbmTier(p, ctx, m, packed, readOnly, chunks);
      return ok;
    }
  }

  // ---- map time ----

  private static void mapTimes(String p, GpuContext ctx, SessionTable packed) {
    long g = ctx.granularity();
    MapPlan plan = MapPlan.of(packed.allocations(), Set.of(), g);
    double packedMs = median(() -> {
      long t = System.nanoTime();
      FunctionSession s = FunctionSession.rebuild(ctx, packed);
      double d = ms(t);
      s.close();
      return d;
    });
    System.out.printf("%smap packed: %.3f ms median (%d slabs, %.1f MB mapped)%n", p, packedMs, plan.slabs().size(),
        plan.mappedBytes() / 1e6);
    // The same image as it was laid out before packing: every buffer on its own pages.
    List<AllocationRecord> perBuffer = new ArrayList<>();
    long at = packed.allocations().stream().mapToLong(AllocationRecord::address).min().orElse(0) & -g;
    for (AllocationRecord a : packed.allocations()) {
      perBuffer.add(new AllocationRecord(a.name(), at, a.size()));
      at += (a.size() + g - 1) & -g;
    }
    SessionTable old = new SessionTable(perBuffer, List.of());
    try {
      double oldWayMs = median(() -> {
        long t = System.nanoTime();
        List<DeviceBuffer> buffers = new ArrayList<>();
        try {
          for (AllocationRecord a : perBuffer) {
            buffers.add(ctx.allocateAt(a.address(), a.size()));
          }
          return ms(t);
        } finally {
          buffers.forEach(DeviceBuffer::close);
        }
      });
      double newWayMs = median(() -> {
        long t = System.nanoTime();
        try (FunctionSession s = FunctionSession.rebuild(ctx, old)) {
          return ms(t);
        }
      });
      System.out.printf("%smap per-buffer layout, one mapping per buffer (before): %.3f ms median (%d mappings, "
          + "%.1f MB)%n", p, oldWayMs, perBuffer.size(), (at - perBuffer.get(0).address()) / 1e6);
      System.out.printf("%smap per-buffer layout, coalesced slabs (now): %.3f ms median (%d slabs)%n", p, newWayMs,
          MapPlan.of(perBuffer, Set.of(), g).slabs().size());
    } catch (IllegalStateException e) {
      // The per-buffer layout needs more addresses than the image; something the build left may hold them.
      System.out.printf("%smap per-buffer layout: skipped (%s)%n", p, e.getCause() != null ? e.getCause() : e);
    }
  }

  // ---- host cache -> device ----

  private static boolean cacheToDevice(String p, GpuContext ctx, ImageManifest m, SessionTable packed,
      PinnedChunks chunks) {
    List<ImageManifest.Allocation> order = RestoreOrder.allocations(m);
    List<CoalescedCopies.Copy> coalesced = CoalescedCopies.plan(order, chunks);
    List<CoalescedCopies.Copy> perChunk = new ArrayList<>();
    for (ImageManifest.Allocation a : order) {
      for (ImageManifest.Chunk c : a.chunks()) {
        CachedChunk cc = chunks.find(c.digest()).orElseThrow();
        perChunk.add(new CoalescedCopies.Copy(a.address() + c.offset(), cc.buffer(), cc.offset(), c.length()));
      }
    }
    long bytes = CoalescedCopies.bytes(coalesced);
    try (FunctionSession s = FunctionSession.rebuild(ctx, packed); GpuStream stream = ctx.createStream();
        GpuEvent start = ctx.createEvent(); GpuEvent end = ctx.createEvent()) {
      for (var variant : List.of(Map.entry("coalesced", coalesced), Map.entry("per chunk", perChunk))) {
        double[] gpu = new double[REPEATS];
        double[] wall = new double[REPEATS];
        for (int i = 0; i < REPEATS; i++) {
          long t = System.nanoTime();
          start.record(stream);
          CoalescedCopies.queue(variant.getValue(), stream);
          end.record(stream);
          end.synchronize();
          wall[i] = ms(t);
          gpu[i] = end.elapsedMillisSince(start);
        }
        Arrays.sort(gpu);
        Arrays.sort(wall);
        System.out.printf("%scache->device %s: %.1f MB in %.2f ms = %.1f GB/s best, %.2f ms median on the stream "
            + "(%.2f ms wall median), %d copies%n", p, variant.getKey(), bytes / 1e6, gpu[0], bytes / 1e6 / gpu[0],
            gpu[REPEATS / 2], wall[REPEATS / 2], variant.getValue().size());
      }
      return check(p + "cache->device", ctx, m, m.allocations(), 17);
    }
  }

  // ---- HBM tier ----

  private static boolean hbmTier(String p, GpuContext ctx, ImageManifest m, SessionTable packed, Set<String> readOnly,
      PinnedChunks chunks) throws Exception {
    if (readOnly.isEmpty()) {
      System.out.printf("%shbm: the profile names no read-only allocation; nothing to keep%n", p);
      return true;
    }
    List<ExportedSlab> held;
    try (FunctionSession first = FunctionSession.rebuild(ctx, packed, readOnly,
        FunctionSession.SlabSource.EXPORTABLE_READ_ONLY); GpuStream stream = ctx.createStream()) {
      CoalescedCopies.queue(CoalescedCopies.plan(RestoreOrder.allocations(m), chunks), stream);
      stream.synchronize();
      first.protectReadOnlySlabs();
      long t = System.nanoTime();
      held = HbmExport.exportReadOnly(first);
      System.out.printf("%shbm export: %d read-only slabs, %.1f MB, in %.3f ms (cuMemExportToShareableHandle)%n", p,
          held.size(), ExportedSlab.bytes(held) / 1e6, ms(t));
    }
    // The first instance is gone; the descriptors alone keep its read-only memory on the device.
    boolean ok = true;
    try {
      double importMap = median(() -> {
        List<AutoCloseable> made = new ArrayList<>();
        long t = System.nanoTime();
        for (ExportedSlab s : held) {
          VirtualRange r = ctx.reserveExact(s.address(), s.size());
          PhysicalMemory mem = ctx.importMemory(s.fd(), s.size());
          Mapping map = r.map(0, mem);
          map.setAccess(MemoryAccess.READ);
          made.add(map);
          made.add(mem);
          made.add(r);
        }
        double d = ms(t);
        for (AutoCloseable c : made) {
          try {
            c.close();
          } catch (Exception e) {
            throw new IllegalStateException(e);
          }
        }
        return d;
      });
      System.out.printf("%shbm import+map read-only: %.3f ms median for %.1f MB (%d slabs)%n", p, importMap,
          ExportedSlab.bytes(held) / 1e6, held.size());
      List<ExportedSlab> dups = new ArrayList<>();
      for (ExportedSlab s : held) {
        dups.add(s.withFd(ProcessFds.dup(s.fd())));
      }
      long t = System.nanoTime();
      try (ResidentSlabs resident = new ResidentSlabs(dups);
          FunctionSession next = FunctionSession.rebuild(ctx, packed, readOnly, resident);
          GpuStream stream = ctx.createStream()) {
        double rebuildMs = ms(t);
        List<CoalescedCopies.Copy> rest = CoalescedCopies.plan(RestoreOrder.allocations(m), chunks,
            resident.residentRanges());
        long t2 = System.nanoTime();
        CoalescedCopies.queue(rest, stream);
        stream.synchronize();
        double restMs = ms(t2);
        System.out.printf("%shbm rebuild with resident weights: %.3f ms (import %.3f ms), %d of %d buffers wholly "
            + "resident; the rest from the cache: %.1f MB in %d copies, %.2f ms; total %.2f ms%n", p, rebuildMs,
            resident.importMillis(), resident.residentBuffers().size(), m.allocations().size(),
            CoalescedCopies.bytes(rest) / 1e6, rest.size(), restMs, rebuildMs + restMs);
        ok = check(p + "hbm + cache restore", ctx, m, m.allocations(), 7);
      }
    } finally {
      HbmExport.close(held);
    }
    return ok;
  }

  // ---- checks and helpers ----

  /** Compares every {@code stride}-th chunk of {@code allocations} on the device with its digest. */
  private static boolean check(String what, GpuContext ctx, ImageManifest m, List<ImageManifest.Allocation> allocations,
      int stride) {
    int checked = 0;
    int bad = 0;
    int i = 0;
    for (ImageManifest.Allocation a : allocations) {
      for (ImageManifest.Chunk c : a.chunks()) {
        if (i++ % stride != 0) {
          continue;
        }
        ByteBuffer b = ByteBuffer.allocateDirect(c.length());
        ctx.copyDeviceToHost(b, a.address() + c.offset());
        checked++;
        if (!Digest.of(b).equals(c.digest())) {
          bad++;
        }
      }
    }
    System.out.printf("%s bytes: %d chunks checked, %s%n", what, checked, bad == 0 ? "all match" : bad + " DIFFER");
    return bad == 0;
  }

  private interface Timed {
    double run() throws Exception;
  }

  private static double median(Timed t) {
    double[] d = new double[REPEATS];
    try {
      for (int i = 0; i < REPEATS; i++) {
        d[i] = t.run();
      }
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
    Arrays.sort(d);
    return d[REPEATS / 2];
  }

  private static double ms(long t0) {
    return (System.nanoTime() - t0) / 1e6;
  }

  private static BuildOptions buildOptions(String model) throws Exception {
    BuildOptions o = new BuildOptions().setTag(model);
    switch (model) {
      case "mlp" -> {
        int inputs = 1024;
        o.setFunctionClass("dev.thaw.examples.mlp.MlpFunction")
            .setConfig("{\"layers\": [" + inputs + ", 4096, 4096, 4096, 10], \"seed\": 42, \"maxBatch\": 8}");
        ObjectNode body = JSON.createObjectNode();
        ArrayNode rows = body.putArray("inputs");
        Random r = new Random(7);
        for (int i = 0; i < 2; i++) {
          ArrayNode row = rows.addArray();
          for (int j = 0; j < inputs; j++) {
            row.add(r.nextFloat() * 2 - 1);
          }
        }
        o.addSampleRequest(body);
      }
      case "gpt2", "gpt2-large" -> {
        o.setFunctionClass("dev.thaw.examples.gpt2.Gpt2Function")
            .setConfig("{\"model\": \"" + model + "\", \"seed\": 1, \"maxBatch\": 1, \"maxTokens\": 64}");
        JsonNode request = JSON.readTree("{\"tokens\": [[15718, 20896, 46414, 19723, 24521, 404, 19748, 16241, 3185, "
            + "40007, 45275, 21281, 39983, 5076, 24913, 29307]], \"maxNewTokens\": 1}");
        o.addSampleRequest(request);
      }
      default -> throw new IllegalArgumentException("unknown model " + model + " (mlp, gpt2, gpt2-large)");
    }
    return o;
  }
}
