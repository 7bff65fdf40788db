package dev.thaw.image.restore;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.Images;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.runtime.ChildJvm;
import dev.thaw.runtime.check.CheckKernels;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.Mapping;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.gpu.VirtualRange;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.Callable;

/**
 * What must run in a process of its own because it poisons CUDA there: a write to read-only memory. Prints
 * {@code result.KEY=VALUE} lines, where a value is {@code ok} (or what a call returned) or the CUDA error's name.
 *
 * <ul>
 *   <li>{@code restore DEVICE STORE TAG ondemand|whole}: restores the memory probe's image and sends it a read, a
 *       store into its read-write {@code out}, a store into its read-only {@code values}, and a read again.
 *   <li>{@code copies DEVICE}: what the device does with a copy or memset into a mapping made read-only, synchronous
 *       and queued (the sim device must answer as the GPU does).
 *   <li>{@code queued DEVICE BUSY_BYTES ROUNDS}: a copy queued into a read-write mapping behind {@code ROUNDS} memsets
 *       of {@code BUSY_BYTES} on another stream, then the mapping made read-only before the copy can run: whether
 *       {@code cuMemSetAccess} waits for the device's work, how long it takes, and what becomes of the copy.
 *   <li>{@code underWork DEVICE read|other BYTES ROUNDS}: kernels running while a mapping turns read-only ({@link
 *       #underWork}).
 * </ul>
 */
public final class SlabProtectionChild {

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final long MIB = 1L << 20;

  public static void main(String[] args) throws Exception {
    try (GpuDriver driver = GpuDrivers.open(DeviceChoice.parse(args[1]));
        GpuContext ctx = driver.createContext(0)) {
      switch (args[0]) {
        case "restore" -> restore(ctx, Path.of(args[2]), args[3], args[4].equals("whole"));
        case "copies" -> copies(ctx);
        case "queued" -> queued(ctx, Long.parseLong(args[2]), Integer.parseInt(args[3]));
        case "underWork" -> underWork(ctx, args[2], Long.parseLong(args[3]), Integer.parseInt(args[4]));
        default -> throw new IllegalArgumentException("unknown scenario " + args[0]);
      }
    } catch (Throwable t) {
      t.printStackTrace(System.out);
    }
    System.out.flush();
    // A poisoned context can make the driver's teardown slow or noisy; the scenario is over.
    Runtime.getRuntime().halt(0);
  }

  private static void restore(GpuContext ctx, Path storePath, String tag, boolean whole) throws Exception {
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        RestoreResources resources = RestoreResources.create(ctx)) {
      ImageManifest m = Images.manifest(store, tag);
      print("readOnly", String.join(",", m.readOnlyAllocations()));
      RestoredFunction<?> f;
      OnDemandRestore r = null;
      if (whole) {
        f = new ImageRestorer(store).restore(tag, ctx);
      } else {
        r = new OnDemandRestorer(store).restore(m, ctx, RestoreSource.STORE_ONLY, resources, new OnDemandOptions());
        f = r.function();
      }
      print("read", attempt(() -> values(f, SlabProtectionTest.READ)));
      if (r != null) {
        r.awaitResident();
        // The restore never protects on its own: its owner does, with no request running (as here).
        print("accessWhenResident", SlabProtectionTest.readOnlySlab(f.session()).mapping().access().toString());
        print("protectedIdle", Boolean.toString(r.protectReadOnlySlabs()));
        print("protection", r.protection().toString());
      }
      print("access", SlabProtectionTest.readOnlySlab(f.session()).mapping().access().toString());
      print("writeOut", attempt(() -> values(f, SlabProtectionTest.WRITE_OUT)));
      print("readAgain", attempt(() -> values(f, SlabProtectionTest.READ)));
      print("writeWeights", attempt(() -> values(f, SlabProtectionTest.WRITE_WEIGHTS)));
      print("afterFault", attempt(() -> values(f, SlabProtectionTest.READ)));
    }
  }

  private static String values(RestoredFunction<?> f, String request) throws Exception {
    JsonNode response = f.invoke(FunctionRequest.of(JSON.readTree(request))).json();
    return response.get("values").toString();
  }

  private static void copies(GpuContext ctx) throws Exception {
    long size = 2 * MIB;
    try (VirtualRange range = ctx.reserve(2 * size, 0); PhysicalMemory a = ctx.createMemory(size);
        PhysicalMemory b = ctx.createMemory(size); PinnedBuffer host = ctx.allocatePinned(4096);
        GpuStream stream = ctx.createStream()) {
      Mapping readOnly = range.map(0, a);
      Mapping readWrite = range.map(size, b);
      readOnly.setAccess(MemoryAccess.READ_WRITE);
      readWrite.setAccess(MemoryAccess.READ_WRITE);
      ctx.memsetD8(readOnly.address(), (byte) 0x5a, size);
      readOnly.setAccess(MemoryAccess.READ);
      host.slice(0, 4096).put(new byte[4096]);
      print("syncCopy", attempt(() -> {
        ctx.copyHostToDevice(readOnly.address(), ByteBuffer.allocateDirect(4096));
        return "ok";
      }));
      print("syncMemset", attempt(() -> {
        ctx.memsetD8(readOnly.address(), (byte) 1, 4096);
        return "ok";
      }));
      print("usableAfterSync", attempt(() -> {
        ctx.memsetD8(readWrite.address(), (byte) 2, 4096);
        ctx.synchronize();
        return "ok";
      }));
      print("asyncEnqueue", attempt(() -> {
        stream.copyHostToDeviceAsync(readOnly.address(), host, 0, 4096);
        return "ok";
      }));
      print("asyncSync", attempt(() -> {
        stream.synchronize();
        return "ok";
      }));
      print("unchanged", attempt(() -> {
        ByteBuffer back = ByteBuffer.allocateDirect(4096);
        ctx.copyDeviceToHost(back, readOnly.address());
        for (int i = 0; i < 4096; i++) {
          if (back.get(i) != 0x5a) {
            return "false";
          }
        }
        return "true";
      }));
      print("usableAfterAsync", attempt(() -> {
        ctx.memsetD8(readWrite.address(), (byte) 3, 4096);
        ctx.synchronize();
        return "ok";
      }));
    }
  }

  private static void queued(GpuContext ctx, long busyBytes, int rounds) throws Exception {
    long size = 2 * MIB;
    try (VirtualRange range = ctx.reserve(size, 0); PhysicalMemory a = ctx.createMemory(size);
        VirtualRange busyRange = ctx.reserve(busyBytes, 0); PhysicalMemory busy = ctx.createMemory(busyBytes);
        PinnedBuffer host = ctx.allocatePinned(4096); GpuStream copies = ctx.createStream();
        GpuStream work = ctx.createStream(); GpuEvent done = ctx.createEvent(false)) {
      Mapping target = range.map(0, a);
      target.setAccess(MemoryAccess.READ_WRITE);
      Mapping busyMapping = busyRange.map(0, busy);
      busyMapping.setAccess(MemoryAccess.READ_WRITE);
      ctx.memsetD8(target.address(), (byte) 0x5a, size);
      ctx.synchronize();
      ByteBuffer ones = host.slice(0, 4096);
      for (int i = 0; i < 4096; i++) {
        ones.put(i, (byte) 0x11);
      }
      for (int i = 0; i < rounds; i++) {
        work.memsetD8Async(busyMapping.address(), (byte) i, busyBytes);
      }
      done.record(work);
      copies.waitFor(done);
      copies.copyHostToDeviceAsync(target.address(), host, 0, 4096);
      long t = System.nanoTime();
      print("setAccess", attempt(() -> {
        target.setAccess(MemoryAccess.READ);
        return "ok";
      }));
      print("setAccessMs", String.format("%.3f", (System.nanoTime() - t) / 1e6));
      print("busyDoneAtReturn", Boolean.toString(done.isComplete()));
      print("queuedSync", attempt(() -> {
        copies.synchronize();
        return "ok";
      }));
      print("busyMs", String.format("%.3f", (System.nanoTime() - t) / 1e6));
      print("queuedLanded", attempt(() -> {
        ByteBuffer back = ByteBuffer.allocateDirect(4096);
        ctx.copyDeviceToHost(back, target.address());
        return Boolean.toString(back.get(0) == 0x11);
      }));
    }
  }

  /**
   * A mapping made read-only while kernels run: {@code ROUNDS} grid-stride saxpys ({@code y = 2x + y} over {@code
   * BYTES}) queued on a stream, then, while they run, {@code cuMemSetAccess} to read-only on {@code x} (which they
   * read: {@code which = read}) or on a third mapping no kernel touches ({@code which = other}). What the kernels then
   * report: whether they were still running when the call returned, and the stream's result. This is the ordering
   * the restore used to allow (the first request's kernels reading weights as they turned read-only); {@code
   * SlabProtection} now allows no work in flight at all.
   */
  private static void underWork(GpuContext ctx, String which, long bytes, int rounds) throws Exception {
    try (VirtualRange range = ctx.reserve(3 * bytes, 0); PhysicalMemory x = ctx.createMemory(bytes);
        PhysicalMemory y = ctx.createMemory(bytes); PhysicalMemory z = ctx.createMemory(bytes);
        GpuStream work = ctx.createStream(); GpuEvent done = ctx.createEvent(false);
        GpuModule module = ctx.loadPtx(CheckKernels.ptx())) {
      Mapping mx = range.map(0, x);
      Mapping my = range.map(bytes, y);
      Mapping mz = range.map(2 * bytes, z);
      for (Mapping m : new Mapping[] {mx, my, mz}) {
        m.setAccess(MemoryAccess.READ_WRITE);
      }
      int n = (int) (bytes / 4);
      ctx.memsetD32(mx.address(), Float.floatToRawIntBits(1f), n);
      ctx.memsetD32(my.address(), 0, n);
      ctx.synchronize();
      Kernel saxpy = module.kernel(CheckKernels.SAXPY);
      for (int i = 0; i < rounds; i++) {
        saxpy.launch(Dim3.of(1024), Dim3.of(256), work, 2.0f, mx.address(),
            my.address(), n);
      }
      done.record(work);
      Mapping target = which.equals("read") ? mx : mz;
      long t = System.nanoTime();
      print("setAccess", attempt(() -> {
        target.setAccess(MemoryAccess.READ);
        return "ok";
      }));
      print("setAccessMs", String.format("%.3f", (System.nanoTime() - t) / 1e6));
      print("runningAtReturn", Boolean.toString(!done.isComplete()));
      print("work", attempt(() -> {
        work.synchronize();
        return "ok";
      }));
      print("workMs", String.format("%.3f", (System.nanoTime() - t) / 1e6));
      print("result", attempt(() -> {
        ByteBuffer back = ByteBuffer.allocateDirect(4).order(ByteOrder.LITTLE_ENDIAN);
        ctx.copyDeviceToHost(back, my.address() + bytes - 4);
        return Boolean.toString(back.getFloat(0) == 2f * rounds);
      }));
    }
  }

  /** What {@code call} returned, or the name of the CUDA error it threw. */
  private static String attempt(Callable<String> call) throws Exception {
    try {
      return call.call();
    } catch (CudaException e) {
      return e.errorName();
    } catch (RuntimeException e) {
      CudaException c = CudaException.stickyIn(e);
      return c != null ? c.errorName() : e.getClass().getSimpleName() + ": " + e.getMessage();
    }
  }

  /** Runs a scenario in a child JVM ({@link ChildJvm}): what it printed as {@code result.} lines. */
  static Map<String, String> run(String... args) throws Exception {
    ChildJvm.Result r = ChildJvm.run(SlabProtectionChild.class, args);
    if (r.values().isEmpty() || r.exitCode() != 0) {
      throw new AssertionError("child " + String.join(" ", args) + " exited " + r.exitCode() + ":\n" + r.output());
    }
    return r.values();
  }

  private static void print(String key, String value) {
    System.out.println("result." + key + "=" + value);
  }
}
