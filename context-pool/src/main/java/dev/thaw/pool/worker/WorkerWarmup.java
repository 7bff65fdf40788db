package dev.thaw.pool.worker;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.Images;
import dev.thaw.image.restore.HelperLink;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.image.restore.OnDemandRestore;
import dev.thaw.image.restore.OnDemandRestorer;
import dev.thaw.image.restore.PreparedRestore;
import dev.thaw.image.restore.RestorePlan;
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.pool.cache.CachedChunk;
import dev.thaw.pool.cache.ChunkPlacement;
import dev.thaw.pool.cache.PinnedChunks;
import dev.thaw.pool.hbm.ExportedSlab;
import dev.thaw.pool.hbm.HbmExport;
import dev.thaw.pool.hbm.ResidentSlabs;
import dev.thaw.pool.hbm.TieredRestoreSource;
import dev.thaw.pool.protocol.Frame;
import dev.thaw.pool.protocol.FrameCodec;
import dev.thaw.pool.protocol.WorkerMessages.Become;
import dev.thaw.pool.protocol.WorkerMessages.BecomeAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Hbm;
import dev.thaw.pool.protocol.WorkerMessages.Source;
import dev.thaw.runtime.check.CheckKernels;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.gpu.VirtualRange;
import dev.thaw.runtime.host.ProcessFds;
import dev.thaw.runtime.speculation.AccessProfile;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.function.BooleanSupplier;

/**
 * What a worker runs before it says it is warm, so that a cold invoke does not pay for a fresh JVM's cold code:
 * class loading and JIT of the launch path (a loop of real launches through {@link FunctionSession}), Jackson's
 * request and response path, and optionally a whole restore + invoke of a warm-up image. Everything it
 * allocates is freed again, so the address space an image maps into is empty when it ends. Every warm-up takes a
 * {@code stop} test and ends early once it says a request is waiting: a warm-up is worth running only while
 * nobody waits for the worker.
 */
final class WorkerWarmup {

  private static final int ELEMENTS = 1024;
  /** Launches between two looks at whether a request is waiting. */
  private static final int STOP_CHECK_EVERY = 64;

  private WorkerWarmup() {}

  /**
   * Launches {@code thaw_fill_u32} {@code launches} times and checks the last fill landed: a warm-up that also
   * proves the device computes. Stops early (its allocation freed) once {@code stop} says a request is waiting.
   *
   * @return true if every launch ran, false if cut short
   */
  static boolean launches(GpuContext context, int launches, BooleanSupplier stop) throws Exception {
    if (launches <= 0) {
      return true;
    }
    try (FunctionSession s = FunctionSession.record(context)) {
      s.loadModule("thaw-warmup", CheckKernels.ptx());
      KernelRef fill = s.kernelRef("thaw-warmup", CheckKernels.FILL_U32);
      BufferRef b = s.allocate("thaw-warmup", 4L * ELEMENTS);
      for (int i = 1; i <= launches; i++) {
        if (i % STOP_CHECK_EVERY == 0 && stop.getAsBoolean()) {
          s.synchronize();
          return false;
        }
        s.launch(fill, Dim3.of(4), Dim3.of(256), b, i, ELEMENTS);
      }
      s.synchronize();
      ByteBuffer out = ByteBuffer.allocateDirect(4 * ELEMENTS).order(ByteOrder.LITTLE_ENDIAN);
      s.download(b, 0, out);
      if (out.getInt(0) != launches || out.getInt(4 * (ELEMENTS - 1)) != launches) {
        throw new IllegalStateException("warm-up kernel wrote " + out.getInt(0) + ", expected " + launches);
      }
    }
    return true;
  }

  /**
   * The request and response path: JSON in, a tree, JSON out; and the BECOME's frames, which a worker reads and answers
   * once in its life, so a cold start would otherwise be the first to load and run their code (its head parsed, its
   * answer made and written: milliseconds in a fresh JVM). Needs no context.
   */
  static void json(ObjectMapper json, BooleanSupplier stop) {
    for (int i = 0; i < 200 && !stop.getAsBoolean(); i++) {
      try {
        JsonNode tree = json.readTree("{\"tokens\": [[464, 2068, " + i + "]], \"maxNewTokens\": 1, \"x\": [0.5, 1.5]}");
        FunctionRequest.of(tree);
        json.writeValueAsBytes(tree);
        if (i % 10 == 0) {
          becomeFrames(i);
        }
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }

  /** A BECOME with every optional part, written and read back as the pipe carries it, and an answer to it written. */
  private static void becomeFrames(int i) throws IOException {
    Become sent = new Become("warmup", new Source("cache", "/", new Hbm(1, ""), List.of(1), 0.5, new Hbm(1, "", 1)),
        i, false, "warmup@" + i, true);
    ByteArrayOutputStream pipe = new ByteArrayOutputStream();
    FrameCodec.write(pipe, Frame.of(i, sent));
    Frame read = FrameCodec.read(new ByteArrayInputStream(pipe.toByteArray()), 1 << 20);
    Become b = Become.from(read.head());
    Map<String, Double> phases = new LinkedHashMap<>();
    phases.put("queued", 0.0);
    phases.put("total", 0.0);
    BecomeAnswer answer = new BecomeAnswer(phases, b.manifestBytes(), b.source().kind(), b.source().helpers(), false,
        -1, System.nanoTime(), 0).sentAt(System.nanoTime());
    FrameCodec.write(new ByteArrayOutputStream(), Frame.of(read.id(), answer));
  }

  /**
   * Parses a real manifest (an MLP image's, PTX elided) a few times: the first {@link ImageManifest#read} in a JVM
   * pays for Jackson's introspection of every manifest record, hundreds of milliseconds a BECOME must not pay.
   * Best effort: a manifest the format has outgrown still warms most of the parser, and is not an error.
   */
  static void manifests(BooleanSupplier stop) {
    byte[] bytes;
    try (InputStream in = WorkerWarmup.class.getResourceAsStream("warmup-manifest.json")) {
      if (in == null) {
        return;
      }
      bytes = in.readAllBytes();
    } catch (IOException e) {
      return;
    }
    for (int i = 0; i < 20 && !stop.getAsBoolean(); i++) {
      try {
        ImageManifest m = ImageManifest.read(bytes);
        m.totalBytes();
        m.chunkDigests();
        m.toBytes();
      } catch (RuntimeException e) {
        return;
      }
    }
    // A BECOME of a large model parses megabytes: thousands of chunks, hundreds of allocations. A small manifest
    // leaves those loops interpreted; this one is the size of GPT-2-large's, so the JIT compiles them now.
    byte[] large;
    try {
      large = largeManifest(bytes, LARGE_ALLOCATIONS, LARGE_CHUNKS_PER_ALLOCATION);
    } catch (IOException | RuntimeException e) {
      return;
    }
    for (int i = 0; i < 6 && !stop.getAsBoolean(); i++) {
      try {
        ImageManifest m = ImageManifest.read(large);
        m.totalBytes();
        m.chunkDigests();
        List<ChunkPlacement.Entry> entries = new ArrayList<>();
        long at = 0;
        for (ImageManifest.Allocation a : m.allocations()) {
          for (ImageManifest.Chunk c : a.chunks()) {
            entries.add(new ChunkPlacement.Entry(c.digest(), at, c.length()));
            at += c.length();
          }
        }
        ChunkPlacement p = ChunkPlacement.fromBytes(new ChunkPlacement("warm-up", entries).toBytes());
        p.runs();
      } catch (RuntimeException e) {
        return;
      }
    }
  }

  /** About GPT-2-large's shape: 436 allocations, 5,363 chunks. */
  private static final int LARGE_ALLOCATIONS = 440;
  private static final int LARGE_CHUNKS_PER_ALLOCATION = 12;

  /**
   * The small manifest with its allocations replaced by {@code allocations} of {@code chunksPerAllocation}
   * distinct chunks each, its access order naming them all: valid, and as large as a real model's.
   */
  static byte[] largeManifest(byte[] small, int allocations, int chunksPerAllocation) throws IOException {
    ObjectMapper json = new ObjectMapper();
    ObjectNode root = (ObjectNode) json.readTree(small);
    ArrayNode allocs = root.putArray("allocations");
    ArrayNode order = json.createArrayNode();
    Random random = new Random(1);
    byte[] raw = new byte[32];
    long total = 0;
    for (int i = 0; i < allocations; i++) {
      ObjectNode a = allocs.addObject();
      String name = "warm" + i;
      int length = 1 << 16;
      a.put("name", name);
      a.put("address", "0x" + Long.toHexString(0x7f0000000000L + (long) i * (1L << 24)));
      a.put("size", (long) length * chunksPerAllocation);
      ArrayNode chunks = a.putArray("chunks");
      for (int j = 0; j < chunksPerAllocation; j++) {
        random.nextBytes(raw);
        ObjectNode c = chunks.addObject();
        c.put("digest", Digest.fromBytes(raw).toString());
        c.put("offset", (long) length * j);
        c.put("length", length);
      }
      total += (long) length * chunksPerAllocation;
      order.add(name);
    }
    ((ObjectNode) root.path("build")).put("totalBytes", total);
    ((ObjectNode) root.path("profile")).set("firstAccessOrder", order);
    ((ObjectNode) root.path("profile")).remove("writtenAllocations");
    return json.writeValueAsBytes(root);
  }

  /** Allocations of the rehearsal image: about as many as GPT-2-large has (518). */
  static final int REHEARSAL_ALLOCATIONS = 512;
  static final int REHEARSAL_CHUNKS_PER_ALLOCATION = 4;
  static final int REHEARSAL_CHUNK_BYTES = 16 << 10;
  static final int REHEARSALS = 6;
  /**
   * Chunks of the HBM rehearsal image: 15 KiB, so that its 60 KiB allocations do not tile 2 MiB pages and one
   * read-only allocation runs from the read-only slab into the written one, as a packed model's last weight does.
   */
  static final int HBM_REHEARSAL_CHUNK_BYTES = 15 << 10;
  static final int HBM_REHEARSALS = 4;

  /**
   * Rehearses what a BECOME of a prepared image runs, {@value #REHEARSALS} times, on a synthetic image of
   * {@value #REHEARSAL_ALLOCATIONS} allocations ({@value #REHEARSAL_CHUNKS_PER_ALLOCATION} chunks each, half of
   * them read-only, 32 MiB in all) at addresses this context has free, its chunks in a pinned host buffer laid
   * out in restore order as the host cache lays them: preparing it ({@link OnDemandRestorer#prepare}), mapping it,
   * starting the copy stream, one gated invoke, waiting for every byte, closing it. The JIT compiles the per-
   * allocation and per-chunk code of that path now, before a cold start runs it. Leaves nothing mapped.
   *
   * @param store a store for the restorer to fall back on (never read: the host buffer has every chunk)
   */
  static void rehearse(GpuContext context, RestoreResources resources, ChunkStore store) throws Exception {
    rehearse(context, resources, store, () -> false);
  }

  /**
   * {@link #rehearse(GpuContext, RestoreResources, ChunkStore)}, stopping between rehearsals once {@code stop} says
   * a request is waiting.
   *
   * @return true if every rehearsal ran, false if cut short
   */
  static boolean rehearse(GpuContext context, RestoreResources resources, ChunkStore store, BooleanSupplier stop)
      throws Exception {
    try (RehearsalImage image = RehearsalImage.create(context, REHEARSAL_CHUNK_BYTES, false)) {
      RestoreSource source = image.source();
      OnDemandRestorer restorer = new OnDemandRestorer(store);
      for (int i = 0; i < REHEARSALS; i++) {
        if (stop.getAsBoolean()) {
          return false;
        }
        PreparedRestore prepared = restorer.prepare(image.plan(), context, source);
        try (OnDemandRestore r = restorer.restore(prepared, source, resources, new OnDemandOptions())) {
          r.function().invoke(FunctionRequest.of(JsonNodeFactory.instance.objectNode()));
          r.awaitResident();
        }
      }
    }
    return true;
  }

  /**
   * Rehearses a cold start on a server with an HBM tier, on a synthetic image whose read-only allocations lie
   * before its written ones (one of them running into the written slab): once as the image's first start (read-only
   * slabs created exportable, exported when resident, as an evicted instance hands them to the tier), then
   * {@value #HBM_REHEARSALS} times as a start from the tier: the descriptors taken back ({@code pidfd_getfd}, from
   * this process), imported and mapped read-only at the recorded addresses, the rest restored from the host
   * buffer through {@link TieredRestoreSource}, one gated invoke. Each rehearsal checks that the device holds the
   * image's bytes, the imported ones and the boundary allocation's: a device that hands on memory wrongly fails
   * here, not in a tenant's request. Leaves nothing mapped and no descriptor open.
   *
   * @throws CudaException if the device refuses exportable memory or its import: the worker
   *     serves without the rehearsal (and cold starts from the tier copy everything from the host cache)
   */
  static void rehearseHbm(GpuContext context, RestoreResources resources, ChunkStore store) throws Exception {
    rehearseHbm(context, resources, store, () -> false);
  }

  /**
   * {@link #rehearseHbm(GpuContext, RestoreResources, ChunkStore)}, stopping between rehearsals once {@code stop}
   * says a request is waiting.
   *
   * @return true if every rehearsal ran, false if cut short
   */
  static boolean rehearseHbm(GpuContext context, RestoreResources resources, ChunkStore store, BooleanSupplier stop)
      throws Exception {
    try (RehearsalImage image = RehearsalImage.create(context, HBM_REHEARSAL_CHUNK_BYTES, true)) {
      OnDemandRestorer restorer = new OnDemandRestorer(store);
      TieredRestoreSource cacheOnly = new TieredRestoreSource(image.chunks(), null);
      List<ExportedSlab> exported = List.of();
      try {
        PreparedRestore first = restorer.prepare(image.plan(), context, cacheOnly);
        try (OnDemandRestore r = restorer.restore(first, cacheOnly, resources,
            new OnDemandOptions().setSlabSource(FunctionSession.SlabSource.EXPORTABLE_READ_ONLY))) {
          r.function().invoke(FunctionRequest.of(JsonNodeFactory.instance.objectNode()));
          r.awaitResident();
          // As a worker does at EXPORT: idle, resident, so its read-only slabs are protected, and so handed on.
          r.protectReadOnlySlabs();
          exported = HbmExport.exportReadOnly(r.function().session());
        }
        if (exported.isEmpty()) {
          throw new IllegalStateException("the HBM rehearsal image exported no read-only slab");
        }
        // As the protocol carries them: the tier's slabs, one line each.
        String encoded = ExportedSlab.encodeAll(exported);
        for (int i = 0; i < HBM_REHEARSALS; i++) {
          if (stop.getAsBoolean()) {
            return false;
          }
          PreparedRestore prepared = restorer.prepare(image.plan(), context, cacheOnly);
          ResidentSlabs resident = ResidentSlabs.take(ProcessFds.currentPid(), ExportedSlab.decodeAll(encoded));
          OnDemandRestore r;
          try (resident) {
            r = restorer.restore(prepared, new TieredRestoreSource(image.chunks(), resident), resources,
                new OnDemandOptions().setSlabSource(resident));
          }
          try (r) {
            if (resident.residentBuffers().isEmpty()) {
              throw new IllegalStateException("the HBM rehearsal imported no slab");
            }
            r.function().invoke(FunctionRequest.of(JsonNodeFactory.instance.objectNode()));
            r.awaitResident();
            image.check(context, image.boundary());
            image.check(context, image.plan().manifest().allocations().get(0));
          }
        }
      } finally {
        HbmExport.close(exported);
      }
    }
    return true;
  }

  static final int HELPER_REHEARSALS = 3;

  /**
   * Rehearses a restore through other devices' links ({@link HelperLink}), {@value #HELPER_REHEARSALS} times, on the
   * synthetic image of {@link #rehearse}: its host copies split between this device's link and {@code links}, each
   * allocation gated on its event as a cold start's are. The first round checks that every read-only allocation holds
   * the image's bytes: a link that lands bytes wrongly fails the worker's start, not a tenant's request. Leaves
   * nothing mapped; the links are this worker's again after each round.
   *
   * @return true if every rehearsal ran, false if cut short by {@code stop}
   */
  static boolean rehearseHelpers(GpuContext context, RestoreResources resources, ChunkStore store,
      List<HelperLink> links, BooleanSupplier stop) throws Exception {
    try (RehearsalImage image = RehearsalImage.create(context, REHEARSAL_CHUNK_BYTES, false)) {
      RestoreSource source = image.source();
      OnDemandRestorer restorer = new OnDemandRestorer(store);
      for (int i = 0; i < HELPER_REHEARSALS; i++) {
        if (stop.getAsBoolean()) {
          return false;
        }
        PreparedRestore prepared = restorer.prepare(image.plan(), context, source);
        try (OnDemandRestore r = restorer.restore(prepared, source, resources,
            new OnDemandOptions().setHelpers(links))) {
          r.function().invoke(FunctionRequest.of(JsonNodeFactory.instance.objectNode()));
          r.awaitResident();
          if (i == 0) {
            ImageManifest m = image.plan().manifest();
            for (ImageManifest.Allocation a : m.allocations()) {
              if (!m.profile().writtenAllocations().contains(a.name())) {
                image.check(context, a);
              }
            }
          }
        }
      }
    }
    return true;
  }

  /**
   * A synthetic image of {@value #REHEARSAL_ALLOCATIONS} allocations of {@value #REHEARSAL_CHUNKS_PER_ALLOCATION}
   * chunks each, half of them written (the odd ones, which {@link RehearsalFunction} fills), at addresses the
   * context has free, with its chunks (random bytes) in a pinned host buffer laid out in restore order.
   *
   * @param readOnlyFirst lay every read-only allocation out before the written ones (a model's weights, then its
   *     buffers); else alternate them
   */
  private record RehearsalImage(RestorePlan plan, Map<Digest, Long> at, PinnedBuffer host, int chunkBytes)
      implements AutoCloseable {

    static RehearsalImage create(GpuContext context, int chunkBytes, boolean readOnlyFirst) throws Exception {
      long size = (long) REHEARSAL_CHUNKS_PER_ALLOCATION * chunkBytes;
      long total = size * REHEARSAL_ALLOCATIONS;
      long base;
      try (VirtualRange free = context.reserve(total, 0)) {
        base = free.address();
      }
      Random random = new Random(11);
      byte[] raw = new byte[32];
      List<ImageManifest.Allocation> allocations = new ArrayList<>();
      List<String> order = new ArrayList<>();
      List<String> written = new ArrayList<>();
      Map<Digest, Long> at = new HashMap<>();
      for (int i = 0; i < REHEARSAL_ALLOCATIONS; i++) {
        List<ImageManifest.Chunk> chunks = new ArrayList<>();
        for (int j = 0; j < REHEARSAL_CHUNKS_PER_ALLOCATION; j++) {
          random.nextBytes(raw);
          Digest d = Digest.fromBytes(raw);
          chunks.add(new ImageManifest.Chunk(d, (long) j * chunkBytes, chunkBytes));
          at.put(d, ((long) i * REHEARSAL_CHUNKS_PER_ALLOCATION + j) * chunkBytes);
        }
        String name = "rehearsal." + i;
        int slot = !readOnlyFirst ? i : i % 2 == 0 ? i / 2 : REHEARSAL_ALLOCATIONS / 2 + i / 2;
        allocations.add(new ImageManifest.Allocation(name, base + slot * size, size, chunks));
        order.add(name);
        if (i % 2 == 1) {
          written.add(name);
        }
      }
      ObjectMapper json = new ObjectMapper();
      DeviceInfo device = context.device();
      // Built for no architecture: the module loads from its PTX, as for a device of another one.
      random.nextBytes(raw);
      ImageManifest.Module check = new ImageManifest.Module("check", "sm_00", new ImageManifest.Blob(
          Digest.fromBytes(raw), 1), CheckKernels.ptx(), List.of());
      String fill = "check/" + CheckKernels.FILL_U32;
      ObjectNode state = json.createObjectNode().put("fill", fill).put("allocations", REHEARSAL_ALLOCATIONS);
      ImageManifest manifest = new ImageManifest(ImageManifest.SCHEMA_VERSION,
          new ImageManifest.Function(RehearsalFunction.class.getName(), json.createObjectNode()),
          new ImageManifest.Device(device.name(), "0.0", "sm_00", "rehearsal"), allocations, List.of(check),
          state, List.of(), new ImageManifest.Build("", "", 0, total, total, at.size()),
          new ImageManifest.Profile("recorded", 0, order, Map.of(fill, new dev.thaw.runtime.speculation
              .AccessProfile.KernelProfile(AccessProfile.Verdict.EXACT, 1, List.of(),
              List.of())), written));
      PinnedBuffer host = context.allocatePinned(total);
      try {
        // Random bytes: a restore that copies a chunk to the wrong place, or not at all, is seen by check.
        ByteBuffer b = host.slice(0, (int) total);
        byte[] page = new byte[chunkBytes];
        while (b.hasRemaining()) {
          random.nextBytes(page);
          b.put(page, 0, Math.min(page.length, b.remaining()));
        }
        return new RehearsalImage(RestorePlan.of(manifest), at, host, chunkBytes);
      } catch (RuntimeException e) {
        host.close();
        throw e;
      }
    }

    /** The chunks as the restore reads them from a host tier. */
    RestoreSource source() {
      return m -> d -> {
        Long offset = at.get(d);
        return offset == null ? null : new RestoreSource.HostChunk(host, offset);
      };
    }

    /** The chunks as a worker's view of the host cache finds them. */
    PinnedChunks chunks() {
      return d -> {
        Long offset = at.get(d);
        return offset == null ? Optional.empty()
            : Optional.of(new CachedChunk(d, host, offset, chunkBytes));
      };
    }

    /** The read-only allocation that runs past the last read-only page (with {@code readOnlyFirst}), or null. */
    ImageManifest.Allocation boundary() {
      long page = 2L << 20;
      for (ImageManifest.Allocation a : plan.manifest().allocations()) {
        if (!plan.manifest().profile().writtenAllocations().contains(a.name())
            && a.address() / page != (a.address() + a.size() - 1) / page) {
          return a;
        }
      }
      return null;
    }

    /** @throws IllegalStateException if {@code a}'s bytes on the device are not the host buffer's */
    void check(GpuContext context, ImageManifest.Allocation a) {
      if (a == null) {
        return;
      }
      ByteBuffer device = ByteBuffer.allocateDirect((int) a.size());
      context.copyDeviceToHost(device, a.address());
      long offset = at.get(a.chunks().get(0).digest());
      if (!device.equals(host.slice(offset, (int) a.size()))) {
        throw new IllegalStateException("a rehearsal found other bytes on the device than the image's in "
            + a.name() + " at 0x" + Long.toHexString(a.address()));
      }
    }

    @Override
    public void close() {
      host.close();
    }
  }

  /**
   * Restores {@code tag} on demand, invokes it with each of its sample requests and closes it: the cold path, warm.
   * Between samples it stops once {@code stop} says a request is waiting.
   *
   * @return true if it ran to its end
   */
  static boolean image(GpuContext context, RestoreResources resources, ChunkStore store, String tag,
      BooleanSupplier stop) throws Exception {
    if (stop.getAsBoolean()) {
      return false;
    }
    ImageManifest manifest = Images.manifest(store, tag);
    try (OnDemandRestore r = new OnDemandRestorer(store).restore(manifest, context, RestoreSource.STORE_ONLY,
        resources, new OnDemandOptions())) {
      for (ImageManifest.Sample sample : manifest.samples()) {
        if (stop.getAsBoolean()) {
          r.awaitResident();
          return false;
        }
        r.function().invoke(FunctionRequest.of(sample.request()));
      }
      r.awaitResident();
      r.function().session().synchronize();
    }
    return true;
  }
}
