package dev.thaw.image.restore;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.Images;
import dev.thaw.image.InvalidManifestException;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.staging.StagingRing;
import dev.thaw.image.store.ChunkNotFoundException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.function.FunctionLoader;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.HostStates;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.AddressUnavailableException;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.host.Threads;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * The full restore: every byte of an image onto the device before the function serves. The baseline that
 * on-demand restore is measured against.
 *
 * <p>Steps: read and check the manifest; compare devices (another architecture loads the PTX instead of the
 * cubin; another device name is allowed and noted); {@link FunctionSession#rebuild} maps every allocation at its
 * recorded address and loads the modules; then every chunk is read from the store into pinned staging by a read
 * pool, <em>its digest verified</em>, and only then copied to the device on a restore stream, pipelined over
 * {@link RestoreOptions#stagingBuffers()} buffers; then the read-only allocations (the profile's, mapped in slabs of
 * their own) are made read-only on the device, once every copy has completed; last the host state is read back.
 *
 * <p>Invariant: no byte reaches the device before its chunk's digest has been checked, so no function runs on
 * unverified data. A restore that fails at any step frees everything it mapped.
 */
public final class ImageRestorer {

  private final ChunkStore store;
  private final RestoreOptions options;
  private final StagingRing ring;
  private final ExecutorService readers;

  public ImageRestorer(ChunkStore store) {
    this(store, new RestoreOptions());
  }

  /** A restorer that makes its staging and read threads per restore, as {@code options} say (one-shot commands). */
  public ImageRestorer(ChunkStore store, RestoreOptions options) {
    this.store = store;
    this.options = options;
    this.ring = null;
    this.readers = null;
  }

  /**
   * A restorer that streams through its owner's staging ring and read threads, made once for many restores (a
   * pooled worker). One restore at a time uses them.
   */
  public ImageRestorer(ChunkStore store, StagingRing ring, ExecutorService readers) {
    this.store = store;
    this.options = new RestoreOptions();
    this.ring = ring;
    this.readers = readers;
  }

  public RestoredFunction<?> restore(String tag, GpuContext context) {
    return restore(tag, context, ProgressListener.NONE);
  }

  /**
   * Restores the image {@code tag} points at into {@code context}.
   *
   * @throws ImageNotFoundException if no image has that tag
   * @throws InvalidManifestException if its manifest does not read
   * @throws CorruptChunkException naming the chunk whose bytes do not match its digest
   * @throws ChunkNotFoundException naming a chunk the store lacks
   * @throws ImageRestoreException if the function class cannot be loaded, an address is taken, or the state
   *     does not read
   */
  public RestoredFunction<?> restore(String tag, GpuContext context, ProgressListener progress) {
    long start = System.nanoTime();
    ImageManifest manifest = Images.manifest(store, tag);
    ThawFunction<?> function;
    try {
      function = FunctionLoader.load(manifest.function().className());
    } catch (IllegalArgumentException e) {
      throw new ImageRestoreException("image '" + tag + "': " + e.getMessage(), e);
    }
    double openMs = millisSince(start);
    return restore(tag, manifest, function, context, progress, start, openMs);
  }

  /**
   * Restores an image whose manifest the caller already holds (a pooled worker is handed the manifest by its
   * parent), reading its chunks from this restorer's store. {@code name} names the image in messages.
   *
   * @throws ImageRestoreException if the function class cannot be loaded, an address is taken, or the state
   *     does not read; and as {@link #restore(String, GpuContext, ProgressListener)} for chunks
   */
  public RestoredFunction<?> restore(String name, ImageManifest manifest, GpuContext context,
      ProgressListener progress) {
    long start = System.nanoTime();
    ThawFunction<?> function;
    try {
      function = FunctionLoader.load(manifest.function().className());
    } catch (IllegalArgumentException e) {
      throw new ImageRestoreException("image '" + name + "': " + e.getMessage(), e);
    }
    return restore(name, manifest, function, context, progress, start, millisSince(start));
  }

  private <S> RestoredFunction<S> restore(String tag, ImageManifest manifest, ThawFunction<S> function,
      GpuContext context, ProgressListener progress, long start, double openMs) {
    List<String> notes = new ArrayList<>();
    DeviceInfo here = context.device();
    ImageManifest.Device built = manifest.device();
    boolean sameArch = here.smArch().equals(built.smArch());
    if (!sameArch) {
      notes.add("built for " + built.smArch() + ", this device is " + here.smArch()
          + ": modules are compiled from their PTX");
    }
    if (!here.name().equals(built.name())) {
      notes.add("built on " + built.name() + ", restoring on " + here.name());
    }

    long t = System.nanoTime();
    Map<String, byte[]> cubins = new HashMap<>();
    if (sameArch) {
      for (ImageManifest.Module m : manifest.modules()) {
        ByteBuffer b = ByteBuffer.allocate(m.cubin().length());
        readVerified(m.cubin().digest(), b, "the cubin of module '" + m.name() + "'");
        cubins.put(m.name(), b.array());
      }
    }
    double cubinMs = millisSince(t);

    FunctionSession session;
    try {
      session = FunctionSession.rebuild(context, manifest.sessionTable(cubins), manifest.readOnlyAllocations(),
          FunctionSession.SlabSource.FRESH);
    } catch (AddressUnavailableException e) {
      throw new ImageRestoreException("image '" + tag + "' needs its device addresses, and one is taken in this "
          + "process: " + e.getMessage(), e);
    }
    double modulesMs = cubinMs + session.rebuildTimings().moduleNanos() / 1e6;
    double mapMs = session.rebuildTimings().mapNanos() / 1e6;

    try {
      t = System.nanoTime();
      copyIn(manifest, session, progress);
      // Every copy has completed (copyIn synchronizes): a write to a buffer the profile called read-only faults now.
      session.protectReadOnlySlabs();
      double copyMs = millisSince(t);

      t = System.nanoTime();
      S state;
      try {
        state = HostStates.read(manifest.hostState(), function.stateType());
      } catch (IllegalArgumentException e) {
        throw new ImageRestoreException("image '" + tag + "': " + e.getMessage(), e);
      }
      double stateMs = millisSince(t);
      RestoreTimings timings = new RestoreTimings(openMs, mapMs, modulesMs, copyMs, stateMs, millisSince(start),
          manifest.totalBytes());
      return new RestoredFunction<>(tag, manifest, function, session, state, timings, notes);
    } catch (RuntimeException | Error e) {
      try {
        session.close();
      } catch (RuntimeException suppressed) {
        e.addSuppressed(suppressed);
      }
      throw e;
    }
  }

  // ---- copy + verify ----

  /** A run of consecutive chunks of one allocation that fits in one staging buffer: one host → device copy. */
  private record Batch(String allocation, long device, long offset, List<ImageManifest.Chunk> chunks, int bytes) {}

  private record InFlight(Batch batch, int slot, CompletableFuture<Void> verified) {}

  private void copyIn(ImageManifest manifest, FunctionSession session, ProgressListener progress) {
    long largestAllocation = manifest.allocations().stream().mapToLong(ImageManifest.Allocation::size).max()
        .orElse(0);
    if (largestAllocation == 0) {
      return;
    }
    long largestChunk = manifest.allocations().stream().flatMap(a -> a.chunks().stream())
        .mapToLong(ImageManifest.Chunk::length).max().orElse(0);
    GpuContext context = session.context();
    if (ring != null) {
      if (largestChunk > ring.bytes()) {
        throw new ImageRestoreException("a chunk of " + largestChunk + " bytes does not fit the staging buffers ("
            + ring.bytes() + " bytes)");
      }
      pipeline(manifest, context, batches(manifest, ring.bytes()), ring, readers, progress);
      return;
    }
    long stagingBytes = Math.max(Math.min(options.stagingBytes(), largestAllocation), Math.max(largestChunk, 4096));
    List<Batch> batches = batches(manifest, stagingBytes);
    int slots = Math.max(2, Math.min(options.stagingBuffers(), batches.size()));
    ExecutorService pool =
        Executors.newFixedThreadPool(options.readThreads(), Threads.daemonFactory("thaw-restore-read"));
    try (StagingRing own = StagingRing.allocate(context, slots, stagingBytes)) {
      pipeline(manifest, context, batches, own, pool, progress);
    } finally {
      pool.shutdownNow();
    }
  }

  /**
   * Reads batches into the ring's slots, verifying each chunk, and queues each batch's copy once all its chunks are
   * verified, in order; returns when every copy has completed. On failure it waits for the reads still running (they
   * write into the ring) and hands every slot back, so the ring can be lent again.
   */
  private void pipeline(ImageManifest manifest, GpuContext context, List<Batch> batches, StagingRing staging,
      ExecutorService pool, ProgressListener progress) {
    progress.start("restore", manifest.totalBytes());
    ArrayDeque<InFlight> reading = new ArrayDeque<>();
    try (GpuStream stream = context.createStream()) {
      for (Batch batch : batches) {
        if (reading.size() == staging.size()) {
          copyToDevice(reading.poll(), stream, staging);
        }
        int slot = staging.acquire();
        reading.add(new InFlight(batch, slot, readBatch(batch, staging.buffer(slot), pool, progress)));
        while (!reading.isEmpty() && reading.peek().verified().isDone()) {
          copyToDevice(reading.poll(), stream, staging);
        }
      }
      while (!reading.isEmpty()) {
        copyToDevice(reading.poll(), stream, staging);
      }
      stream.synchronize();
    } catch (RuntimeException | Error e) {
      for (InFlight f : reading) {
        try {
          f.verified().join();
        } catch (RuntimeException ignored) {
          // The failure that got us here is the one to report.
        }
        staging.release(f.slot());
      }
      throw e;
    } finally {
      progress.finish();
    }
  }

  private static List<Batch> batches(ImageManifest manifest, long stagingBytes) {
    List<Batch> out = new ArrayList<>();
    for (ImageManifest.Allocation a : manifest.allocations()) {
      List<ImageManifest.Chunk> run = new ArrayList<>();
      long runBytes = 0;
      for (ImageManifest.Chunk c : a.chunks()) {
        if (runBytes + c.length() > stagingBytes) {
          out.add(new Batch(a.name(), a.address(), run.get(0).offset(), run, (int) runBytes));
          run = new ArrayList<>();
          runBytes = 0;
        }
        run.add(c);
        runBytes += c.length();
      }
      if (!run.isEmpty()) {
        out.add(new Batch(a.name(), a.address(), run.get(0).offset(), run, (int) runBytes));
      }
    }
    return out;
  }

  private CompletableFuture<Void> readBatch(Batch batch, PinnedBuffer staging, ExecutorService readers,
      ProgressListener progress) {
    List<CompletableFuture<Void>> reads = new ArrayList<>(batch.chunks().size());
    for (ImageManifest.Chunk c : batch.chunks()) {
      int at = (int) (c.offset() - batch.offset());
      reads.add(CompletableFuture.runAsync(() -> {
        readVerified(c.digest(), staging.slice(at, c.length()),
            "allocation '" + batch.allocation() + "' at offset " + c.offset());
        progress.advance(c.length());
      }, readers));
    }
    return CompletableFuture.allOf(reads.toArray(CompletableFuture[]::new));
  }

  /** The copy is queued only once every chunk of the batch is verified: the invariant of this class. */
  private static void copyToDevice(InFlight f, GpuStream stream, StagingRing staging) {
    try {
      join(f.verified());
    } catch (RuntimeException | Error e) {
      staging.release(f.slot());
      throw e;
    }
    stream.copyHostToDeviceAsync(f.batch().device() + f.batch().offset(), staging.buffer(f.slot()), 0,
        f.batch().bytes());
    staging.queued(f.slot(), stream);
    staging.release(f.slot());
  }

  private void readVerified(Digest digest, ByteBuffer dst, String where) {
    VerifiedChunks.read(store, digest, dst, where);
  }

  private static void join(CompletableFuture<?> f) {
    try {
      f.get();
    } catch (ExecutionException e) {
      Throwable c = e.getCause();
      while (c instanceof CompletionException && c.getCause() != null) {
        c = c.getCause();
      }
      if (c instanceof RuntimeException r) {
        throw r;
      }
      if (c instanceof Error err) {
        throw err;
      }
      throw new IllegalStateException(c.toString(), c);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while restoring", e);
    }
  }

  private static double millisSince(long startNanos) {
    return (System.nanoTime() - startNanos) / 1e6;
  }
}
