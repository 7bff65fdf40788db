package dev.thaw.runtime.function;

import dev.thaw.runtime.gpu.AddressUnavailableException;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.Mapping;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.gpu.PtxCompileException;
import dev.thaw.runtime.gpu.VirtualRange;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Pattern;

/**
 * The door through which a {@link ThawFunction} uses the device, and the record of what it did there.
 *
 * <p>Every allocation is named and kept in order with its device address and size; every module is kept with
 * its PTX and the cubin the JIT made. {@link #table()} is that record; with the device memory behind it and
 * the function's host state, it is what an image holds. {@link #rebuild} makes a session from a table in a
 * fresh context: each allocation mapped again at its recorded address, each module loaded again (from the
 * cubin when the architecture matches, else from the PTX), so references in the host state resolve as before.
 *
 * <p>All device work of the function runs on {@link #stream()}. A session is used by one thread at a time.
 * Closing it frees its memory and unloads its modules; the context stays open.
 */
public final class FunctionSession implements AutoCloseable {

  private static final Pattern NAME = Pattern.compile("[A-Za-z0-9][A-Za-z0-9._:\\-]{0,199}");

  private final GpuContext context;
  private final GpuStream stream;
  private final Map<String, Allocation> allocations = new LinkedHashMap<>();
  private final Map<String, LoadedModule> modules = new LinkedHashMap<>();
  private boolean closed;
  /** Bumped whenever an allocation is added or freed, so that indexes over them know when to rebuild. */
  private long allocationsVersion;

  /** A buffer: its own {@link DeviceBuffer} (per-buffer layout), or a piece of a slab ({@code buffer} null). */
  private record Allocation(long address, long size, DeviceBuffer buffer) {}

  /** How a recording session lays its buffers out on the device. */
  public enum Packing {
    /**
     * Buffers are sub-allocated 256-byte aligned, back to back, from a few large slabs: no rounding of each
     * buffer to the 2 MiB granularity, and an image that maps in a few calls. The default.
     */
    SLABS,
    /** Each buffer is its own VMM allocation rounded up to the granularity, as images built before packing. */
    PER_BUFFER
  }

  /** Physical memory for one slab of a rebuilt session, and the access to grant on it. */
  public record SlabBacking(PhysicalMemory memory, MemoryAccess access) {}

  /**
   * Where a rebuilt session's slabs get their physical memory: fresh memory by default; the HBM tier hands in
   * memory another worker left on the device, mapped read-only. The session owns (and closes) what it is given.
   */
  @FunctionalInterface
  public interface SlabSource {

    /** Fresh memory for every slab, read-write. */
    SlabSource FRESH = (context, slab) -> new SlabBacking(context.createMemory(slab.size()), MemoryAccess.READ_WRITE);

    /** Fresh memory, created exportable for read-only slabs so they can outlive this worker on the device. */
    SlabSource EXPORTABLE_READ_ONLY = (context, slab) -> new SlabBacking(slab.readOnly()
        ? context.createExportableMemory(slab.size()) : context.createMemory(slab.size()), MemoryAccess.READ_WRITE);

    SlabBacking back(GpuContext context, MapPlan.Slab slab);
  }

  /** A slab mapped by this session: its plan, physical memory and mapping. */
  public record MappedSlab(MapPlan.Slab slab, PhysicalMemory memory, Mapping mapping) {}

  /** Growth of a recording session's slab space: at least this much, doubling up to {@link #MAX_GROWTH}. */
  static final long MAX_GROWTH = 256L << 20;
  static final long ALIGNMENT = 256;

  private final Packing packing;
  private final Set<String> hostWrites = ConcurrentHashMap.newKeySet();
  /** Mapped slabs, with the ranges that hold them; in the order made. */
  private final List<MappedSlab> slabs = new ArrayList<>();
  private final List<VirtualRange> slabRanges = new ArrayList<>();
  /** Packing while recording: the next free byte and the end of the mapped run it lies in. */
  private long cursor;
  private long limit;
  private long slabBytes;

  private record LoadedModule(GpuModule module, ModuleRecord record, Map<String, Kernel> kernels) {

    LoadedModule(GpuModule module, ModuleRecord record) {
      this(module, record, new HashMap<>());
    }
  }

  private volatile LaunchInterceptor interceptor;
  private RebuildTimings rebuildTimings = new RebuildTimings(0, 0);

  /**
   * Where {@link #rebuild} spent its time, in nanoseconds: mapping the allocations at their recorded addresses,
   * and loading the modules (a JIT from PTX on another architecture). Zero for a recorded session.
   */
  public record RebuildTimings(long mapNanos, long moduleNanos) {}

  private FunctionSession(GpuContext context, Packing packing) {
    this.context = context;
    this.packing = packing;
    this.stream = context.createStream();
  }

  /** An empty session on {@code context}, recording from now on, packing buffers into slabs. */
  public static FunctionSession record(GpuContext context) {
    return record(context, Packing.SLABS);
  }

  /** An empty session on {@code context}, recording from now on: the one {@code init} runs in. */
  public static FunctionSession record(GpuContext context, Packing packing) {
    return new FunctionSession(context, packing);
  }

  /**
   * A session with {@code table}'s allocations mapped again at their recorded addresses (their contents are
   * not copied: that is the restore's job) and its modules loaded again.
   *
   * @throws AddressUnavailableException if a recorded address is taken in this process
   */
  public static FunctionSession rebuild(GpuContext context, SessionTable table) {
    return rebuild(context, table, Set.of(), SlabSource.FRESH);
  }

  /**
   * Like {@link #rebuild(GpuContext, SessionTable)}, mapping the allocations as {@link MapPlan} groups them: a few
   * slabs, read-only buffers ({@code readOnly}) in slabs of their own, each slab's memory from {@code source}.
   * Images built with either {@link Packing} rebuild this way.
   */
  public static FunctionSession rebuild(GpuContext context, SessionTable table, Set<String> readOnly,
      SlabSource source) {
    return rebuild(context, table, readOnly, source, Map.of());
  }

  /**
   * Like {@link #rebuild(GpuContext, SessionTable, Set, SlabSource)}, taking the modules named in {@code loaded}
   * as they are: loaded into {@code context} ahead of time (a pooled worker loads a registered image's code while
   * it is idle, see {@code docs/design/context-pool.md}). The session owns them from then on and unloads them when
   * it closes, also when the rebuild fails.
   */
  public static FunctionSession rebuild(GpuContext context, SessionTable table, Set<String> readOnly,
      SlabSource source, Map<String, GpuModule> loaded) {
    FunctionSession session = new FunctionSession(context, Packing.SLABS);
    // Owned from here: a failed rebuild unloads them with the session.
    for (ModuleRecord m : table.modules()) {
      GpuModule module = loaded.get(m.name());
      if (module != null) {
        session.modules.put(m.name(), new LoadedModule(module, m));
      }
    }
    try {
      long t = System.nanoTime();
      for (AllocationRecord a : table.allocations()) {
        checkName(a.name(), "buffer");
        if (a.size() <= 0 || session.allocations.containsKey(a.name())) {
          throw new IllegalArgumentException("allocation '" + a.name() + "' is repeated or has size " + a.size());
        }
      }
      MapPlan plan = MapPlan.of(table.allocations(), readOnly, context.granularity());
      for (MapPlan.Slab slab : plan.slabs()) {
        session.mapSlab(slab, source);
      }
      for (AllocationRecord a : table.allocations()) {
        session.allocations.put(a.name(), new Allocation(a.address(), a.size(), null));
        session.allocationsVersion++;
      }
      long mapNanos = System.nanoTime() - t;
      t = System.nanoTime();
      String arch = context.device().smArch();
      for (ModuleRecord m : table.modules()) {
        if (session.modules.containsKey(m.name())) {
          continue;
        }
        GpuModule module = arch.equals(m.arch()) ? context.loadCubin(m.cubin()) : context.loadPtx(m.ptx());
        ModuleRecord kept = arch.equals(m.arch()) ? m : new ModuleRecord(m.name(), m.ptx(), module.cubin(), arch);
        session.modules.put(m.name(), new LoadedModule(module, kept));
      }
      session.rebuildTimings = new RebuildTimings(mapNanos, System.nanoTime() - t);
      return session;
    } catch (RuntimeException e) {
      session.close();
      throw e;
    }
  }

  public GpuContext context() {
    return context;
  }

  /** How this session lays buffers out; a rebuilt session is always {@link Packing#SLABS}. */
  public Packing packing() {
    return packing;
  }

  /** The slabs this session mapped: while recording, its growth steps; rebuilt, its {@link MapPlan}'s slabs. */
  public List<MappedSlab> slabs() {
    return List.copyOf(slabs);
  }

  /** Maps one planned slab exactly at its address with memory from {@code source}. */
  private void mapSlab(MapPlan.Slab slab, SlabSource source) {
    VirtualRange range = context.reserveExact(slab.address(), slab.size());
    PhysicalMemory memory = null;
    try {
      SlabBacking backing = source.back(context, slab);
      memory = backing.memory();
      if (memory.size() != slab.size()) {
        throw new IllegalArgumentException("memory of " + memory.size() + " bytes for a slab of " + slab.size());
      }
      Mapping mapping = range.map(0, memory);
      mapping.setAccess(backing.access());
      slabs.add(new MappedSlab(slab, memory, mapping));
      slabRanges.add(range);
      slabBytes += slab.size();
    } catch (RuntimeException e) {
      if (memory != null) {
        memory.close();
      }
      range.close();
      throw e;
    }
  }

  /**
   * Sets every read-only slab's access to {@link MemoryAccess#READ}: once restored, a kernel that writes a buffer
   * the profile called read-only faults instead of changing memory that outlives this instance on the device. Call
   * it only once every copy into those slabs has completed: a copy still queued into one would fault. Slabs that
   * are read-only already (imported from the HBM tier) are left alone.
   */
  public void protectReadOnlySlabs() {
    checkOpen();
    for (MappedSlab s : slabs) {
      if (s.slab().readOnly() && s.mapping().access() != MemoryAccess.READ) {
        s.mapping().setAccess(MemoryAccess.READ);
      }
    }
  }

  /** Sub-allocates {@code size} bytes: 256-byte aligned after the last buffer, growing the slab space as needed. */
  private long pack(long size) {
    long at = (cursor + ALIGNMENT - 1) & -ALIGNMENT;
    if (slabs.isEmpty() || at > limit - size) {
      long g = context.granularity();
      long growth = Math.max((size + g - 1) & -g, Math.min(MAX_GROWTH, Math.max(g, slabBytes)));
      VirtualRange range = context.reserve(growth, limit);
      boolean contiguous = !slabs.isEmpty() && range.address() == limit;
      PhysicalMemory memory = null;
      try {
        memory = context.createMemory(growth);
        Mapping mapping = range.map(0, memory);
        mapping.setAccess(MemoryAccess.READ_WRITE);
        slabs.add(new MappedSlab(new MapPlan.Slab(range.address(), growth, false, List.of()), memory, mapping));
        slabRanges.add(range);
        slabBytes += growth;
      } catch (RuntimeException e) {
        if (memory != null) {
          memory.close();
        }
        range.close();
        throw e;
      }
      if (contiguous && at <= range.address() + growth - size) {
        limit = range.address() + growth;
      } else {
        at = range.address();
        limit = range.address() + growth;
      }
    }
    cursor = at + size;
    return at;
  }

  /** Where {@link #rebuild} spent its time; zeros for a session that was recorded. */
  public RebuildTimings rebuildTimings() {
    return rebuildTimings;
  }

  /** The stream all of the function's device work runs on. */
  public GpuStream stream() {
    return stream;
  }

  // ---- device memory ----

  /**
   * Allocates {@code size} bytes of device memory under {@code name}.
   *
   * @throws IllegalArgumentException if the name is taken or not a name (letters, digits, {@code . _ : -},
   *     at most 200 characters, starting with a letter or digit), or the size is not positive
   */
  public BufferRef allocate(String name, long size) {
    checkOpen();
    checkName(name, "buffer");
    if (allocations.containsKey(name)) {
      throw new IllegalArgumentException("a buffer named '" + name + "' is already allocated");
    }
    if (size <= 0) {
      throw new IllegalArgumentException("buffer '" + name + "' needs a positive size, not " + size);
    }
    if (packing == Packing.PER_BUFFER) {
      DeviceBuffer b = context.allocate(size);
      allocations.put(name, new Allocation(b.address(), size, b));
    } else {
      allocations.put(name, new Allocation(pack(size), size, null));
    }
    allocationsVersion++;
    return new BufferRef(name);
  }

  /**
   * Frees a buffer; its name can be used again. A packed buffer's bytes are reused only when it was the last one
   * allocated.
   */
  public void free(BufferRef ref) {
    checkOpen();
    Allocation a = allocation(ref);
    if (a.buffer() != null) {
      a.buffer().close();
    } else if (a.address() + a.size() == cursor) {
      cursor = a.address();
    }
    allocations.remove(ref.name());
    allocationsVersion++;
  }

  /**
   * A counter that changes whenever the session's allocations do (an allocation or a free): an index over
   * {@link #table()}'s allocations is current while this is unchanged. Cheap; never throws.
   */
  public long allocationsVersion() {
    return allocationsVersion;
  }

  /** The device address of the buffer's first byte. */
  public long address(BufferRef ref) {
    return allocation(ref).address();
  }

  /** The buffer's size as allocated. */
  public long size(BufferRef ref) {
    return allocation(ref).size();
  }

  /**
   * The buffer itself, for copies the session does not wrap.
   *
   * @throws IllegalStateException if the buffer is a piece of a slab (use {@link #address} and {@link #size})
   */
  public DeviceBuffer buffer(BufferRef ref) {
    DeviceBuffer b = allocation(ref).buffer();
    if (b == null) {
      throw new IllegalStateException("buffer '" + ref.name() + "' is packed in a slab; it has no DeviceBuffer");
    }
    return b;
  }

  /**
   * Copies {@code src.remaining()} bytes to the buffer at {@code offset}, synchronously: every launch made after it
   * returns sees them. A {@link CopyInterceptor} may instead queue the bytes on {@link #stream()} (on-demand restore
   * does, while the buffer is not restored yet), which keeps that promise for work on the stream.
   */
  public void upload(BufferRef ref, long offset, ByteBuffer src) {
    checkRange(ref, offset, src.remaining());
    hostWrites.add(ref.name());
    long dst = address(ref) + offset;
    if (interceptor instanceof CopyInterceptor c && c.uploadInstead(dst, src, stream)) {
      return;
    }
    context.copyHostToDevice(dst, src);
  }

  /**
   * The buffers {@link #upload} wrote since {@link #clearHostWrites()} (or since the session began): a profile
   * counts them as written, like kernel stores, so they are never taken for read-only.
   */
  public Set<String> hostWrites() {
    return Set.copyOf(hostWrites);
  }

  /** Starts a new {@link #hostWrites()} record, e.g. when profiling begins after {@code init}. */
  public void clearHostWrites() {
    hostWrites.clear();
  }

  /** Fills {@code dst.remaining()} bytes from the buffer at {@code offset}, after the stream's work is done. */
  public void download(BufferRef ref, long offset, ByteBuffer dst) {
    checkRange(ref, offset, dst.remaining());
    long src = address(ref) + offset;
    if (interceptor instanceof CopyInterceptor c) {
      c.beforeDeviceAccess(src, dst.remaining(), stream);
    }
    stream.synchronize();
    context.copyDeviceToHost(dst, src);
  }

  /**
   * Queues a copy of {@code bytes} bytes from {@code src} at {@code srcOffset} to {@code dst} at {@code dstOffset}
   * on {@link #stream()}.
   */
  public void copy(BufferRef dst, long dstOffset, BufferRef src, long srcOffset, long bytes) {
    checkRange(dst, dstOffset, bytes);
    checkRange(src, srcOffset, bytes);
    long to = address(dst) + dstOffset;
    long from = address(src) + srcOffset;
    if (interceptor instanceof CopyInterceptor c) {
      c.beforeDeviceAccess(from, bytes, stream);
      c.beforeDeviceAccess(to, bytes, stream);
    }
    stream.copyDeviceToDeviceAsync(to, from, bytes);
  }

  /** Queues setting {@code bytes} bytes of the buffer at {@code offset} to {@code value} on {@link #stream()}. */
  public void fill(BufferRef ref, long offset, long bytes, byte value) {
    checkRange(ref, offset, bytes);
    long to = address(ref) + offset;
    if (interceptor instanceof CopyInterceptor c) {
      c.beforeDeviceAccess(to, bytes, stream);
    }
    stream.memsetD8Async(to, value, bytes);
  }

  private void checkRange(BufferRef ref, long offset, long bytes) {
    long size = size(ref);
    if (offset < 0 || bytes < 0 || offset > size - bytes) {
      throw new IllegalArgumentException(bytes + " bytes at offset " + offset + " do not fit in buffer '"
          + ref.name() + "' of " + size + " bytes");
    }
  }

  private Allocation allocation(BufferRef ref) {
    checkOpen();
    Allocation a = allocations.get(ref.name());
    if (a == null) {
      throw new IllegalArgumentException("no buffer named '" + ref.name() + "' in this session");
    }
    return a;
  }

  // ---- modules and kernels ----

  /**
   * JIT-compiles {@code ptx} and keeps it under {@code name}, with the cubin, for the image.
   *
   * @throws PtxCompileException with the JIT log if it does not compile
   */
  public void loadModule(String name, String ptx) {
    checkOpen();
    checkName(name, "module");
    if (modules.containsKey(name)) {
      throw new IllegalArgumentException("a module named '" + name + "' is already loaded");
    }
    GpuModule module = context.loadPtx(ptx);
    modules.put(name, new LoadedModule(module, new ModuleRecord(name, ptx, module.cubin(), context.device().smArch())));
  }

  /** A reference to a kernel of a loaded module, checked to exist. */
  public KernelRef kernelRef(String module, String entry) {
    KernelRef ref = new KernelRef(module, entry);
    kernel(ref);
    return ref;
  }

  /**
   * The kernel a reference names, as this session launches it: through its {@link LaunchInterceptor}. Use
   * this object (or {@link #launch}) for every launch, never the module's kernel directly.
   */
  public Kernel kernel(KernelRef ref) {
    checkOpen();
    LoadedModule m = modules.get(ref.module());
    if (m == null) {
      throw new IllegalArgumentException("no module named '" + ref.module() + "' in this session");
    }
    return m.kernels().computeIfAbsent(ref.entry(), e -> new InterceptedKernel(this, ref, m.module().kernel(e)));
  }

  /**
   * Makes every later launch of this session pass {@code interceptor} first; null removes it. If it is a
   * {@link LaunchRedirect}, it may also run each launch in the kernel's place; if it is a {@link CopyInterceptor},
   * it also sees the session's own uploads, downloads, copies and fills.
   */
  public void setLaunchInterceptor(LaunchInterceptor interceptor) {
    this.interceptor = interceptor;
  }

  LaunchInterceptor interceptor() {
    return interceptor;
  }

  /** The interceptor every launch passes now, or null: so that one can be chained in front of another. */
  public LaunchInterceptor launchInterceptor() {
    return interceptor;
  }

  /** The module loaded under {@code name} and what the session recorded of it. */
  public ModuleRecord moduleRecord(String name) {
    checkOpen();
    LoadedModule m = modules.get(name);
    if (m == null) {
      throw new IllegalArgumentException("no module named '" + name + "' in this session");
    }
    return m.record();
  }

  /**
   * Launches a kernel on {@link #stream()}. Arguments are typed as for {@link Kernel#launch(Dim3, Dim3,
   * GpuStream, Object...)}, and a {@link BufferRef} stands for its buffer's address.
   */
  public void launch(KernelRef ref, Dim3 grid, Dim3 block, Object... args) {
    Object[] resolved = args;
    for (int i = 0; i < args.length; i++) {
      if (args[i] instanceof BufferRef b) {
        if (resolved == args) {
          resolved = args.clone();
        }
        resolved[i] = address(b);
      }
    }
    kernel(ref).launch(grid, block, stream, resolved);
  }

  /** Waits for the stream's work; reports the first asynchronous error. */
  public void synchronize() {
    checkOpen();
    stream.synchronize();
  }

  // ---- the record ----

  /** What this session has allocated and loaded, in order. */
  public SessionTable table() {
    checkOpen();
    List<AllocationRecord> a = new ArrayList<>(allocations.size());
    allocations.forEach((name, alloc) -> a.add(new AllocationRecord(name, alloc.address(), alloc.size())));
    List<ModuleRecord> m = new ArrayList<>(modules.size());
    modules.values().forEach(loaded -> m.add(loaded.record()));
    return new SessionTable(a, m);
  }

  private void checkOpen() {
    if (closed) {
      throw new IllegalStateException("the function session is closed");
    }
  }

  static void checkName(String name, String what) {
    if (name == null || !NAME.matcher(name).matches()) {
      throw new IllegalArgumentException("'" + name + "' is not a " + what + " name: letters, digits and . _ : -, "
          + "starting with a letter or digit, at most 200 characters");
    }
  }

  /** Frees every buffer, unloads every module and closes the stream. Idempotent; the context stays open. */
  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    RuntimeException failure = null;
    for (AutoCloseable c : closeables()) {
      try {
        c.close();
      } catch (Exception e) {
        failure = failure == null ? new IllegalStateException("closing the function session failed", e) : failure;
      }
    }
    allocations.clear();
    modules.clear();
    slabs.clear();
    slabRanges.clear();
    if (failure != null) {
      throw failure;
    }
  }

  private List<AutoCloseable> closeables() {
    List<AutoCloseable> all = new ArrayList<>();
    all.add(stream);
    allocations.values().stream().filter(a -> a.buffer() != null).forEach(a -> all.add(a.buffer()));
    modules.values().forEach(m -> all.add(m.module()));
    for (int i = slabs.size() - 1; i >= 0; i--) {
      all.add(slabs.get(i).mapping());
      all.add(slabs.get(i).memory());
      all.add(slabRanges.get(i));
    }
    return all;
  }
}
