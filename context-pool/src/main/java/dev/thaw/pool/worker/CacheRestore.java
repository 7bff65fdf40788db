package dev.thaw.pool.worker;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.ImageRestoreException;
import dev.thaw.pool.cache.CachedChunk;
import dev.thaw.pool.cache.CoalescedCopies;
import dev.thaw.pool.cache.PinnedChunks;
import dev.thaw.pool.cache.RestoreOrder;
import dev.thaw.runtime.function.FunctionLoader;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.HostStates;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.AddressUnavailableException;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuStream;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A full restore from the pinned host image cache: cubins read from the arena, allocations mapped at their
 * recorded addresses (a packed image in a few slabs), every byte copied host → device in coalesced copies on
 * the worker's restore stream, then the host state. The arena's bytes were verified when they entered it, so
 * nothing is hashed here (DESIGN: verified once, trusted after).
 *
 * <p>Used when every chunk of the image is in the placement the parent sent; otherwise the worker restores from
 * the store. On-demand restore replaces this once it lands.
 */
final class CacheRestore {

  private CacheRestore() {}

  /** True when {@code chunks} holds every cubin and allocation chunk of {@code manifest}. */
  static boolean covers(ImageManifest manifest, PinnedChunks chunks) {
    for (var d : RestoreOrder.chunks(manifest)) {
      if (chunks.find(d).isEmpty()) {
        return false;
      }
    }
    return true;
  }

  /** Restores {@code manifest}; {@code phases} receives {@code map allocations}, {@code load modules}, {@code copy}, {@code rebuild state}. */
  static Instance restore(String name, ImageManifest manifest, GpuContext context, GpuStream stream,
      PinnedChunks chunks, Map<String, Double> phases) {
    ThawFunction<?> function;
    try {
      function = FunctionLoader.load(manifest.function().className());
    } catch (IllegalArgumentException e) {
      throw new ImageRestoreException("image '" + name + "': " + e.getMessage(), e);
    }
    return restore(name, manifest, function, context, stream, chunks, phases);
  }

  private static <S> Instance restore(String name, ImageManifest manifest, ThawFunction<S> function,
      GpuContext context, GpuStream stream, PinnedChunks chunks, Map<String, Double> phases) {
    long t = System.nanoTime();
    Map<String, byte[]> cubins = new HashMap<>();
    if (context.device().smArch().equals(manifest.device().smArch())) {
      for (ImageManifest.Module m : manifest.modules()) {
        CachedChunk c = chunks.find(m.cubin().digest()).orElseThrow();
        ByteBuffer b = c.buffer().slice(c.offset(), c.length());
        byte[] bytes = new byte[c.length()];
        b.get(bytes);
        cubins.put(m.name(), bytes);
      }
    }
    FunctionSession session;
    try {
      session = FunctionSession.rebuild(context, manifest.sessionTable(cubins));
    } catch (AddressUnavailableException e) {
      throw new ImageRestoreException("image '" + name + "' needs its device addresses, and one is taken in this "
          + "process: " + e.getMessage(), e);
    }
    phases.put("map + modules", millisSince(t));
    try {
      t = System.nanoTime();
      List<CoalescedCopies.Copy> copies = CoalescedCopies.plan(RestoreOrder.allocations(manifest), chunks);
      CoalescedCopies.queue(copies, stream);
      stream.synchronize();
      double copyMs = millisSince(t);
      phases.put("copy", copyMs);
      phases.put("copies", (double) copies.size());
      phases.put("copyGBps", CoalescedCopies.bytes(copies) / (copyMs * 1e6));
      t = System.nanoTime();
      S state;
      try {
        state = HostStates.read(manifest.hostState(), function.stateType());
      } catch (IllegalArgumentException e) {
        throw new ImageRestoreException("image '" + name + "': " + e.getMessage(), e);
      }
      phases.put("rebuild state", millisSince(t));
      return Instance.of(function, session, state);
    } catch (RuntimeException | Error e) {
      try {
        session.close();
      } catch (RuntimeException suppressed) {
        e.addSuppressed(suppressed);
      }
      throw e;
    }
  }

  static Map<String, Double> phases() {
    return new LinkedHashMap<>();
  }

  private static double millisSince(long t) {
    return (System.nanoTime() - t) / 1e6;
  }
}
