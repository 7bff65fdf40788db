package dev.thaw.examples.llama;

import dev.thaw.examples.collective.PartialType;
import dev.thaw.examples.collective.PeerBuffer;
import dev.thaw.examples.collective.PeerGroup;
import dev.thaw.examples.function.Generation;
import dev.thaw.examples.function.SessionModule;
import dev.thaw.examples.function.StagedUpload;
import dev.thaw.examples.function.TokenRequest;
import dev.thaw.examples.llama.LlamaShard.Piece;
import dev.thaw.examples.llama.LlamaShard.Weight;
import dev.thaw.examples.llama.kernels.LlamaKernels;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.InvalidConfigException;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.MemoryAccess;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BiFunction;

/**
 * A Llama-family model split over the GPUs of one host, tensor-parallel: rank r of n holds its {@link LlamaShard}
 * on device {@code devices[r]} and runs {@link LlamaPasses} over it on its own stream and issuing thread of a
 * {@link PeerGroup}, exchanging the o and down products' partial sums and the head's vocabulary slices through Thaw's
 * own collectives. One rank is one device running exactly the single-device passes.
 *
 * <p>{@link #open} checks everything before it allocates: that n splits the model ({@link LlamaShard#check}), that
 * the devices exist, are distinct and are peers ({@link PeerGroup#whyUnusable}), and the batch and context sizes.
 * It then uploads each rank's shard straight from the weights (a checkpoint, or seeded values generated on the host
 * as they are copied: never a file), reading each tensor once for all ranks, and allocates every rank's KV cache and
 * scratch. {@link #generate} runs a greedy request: a prompt pass, then one decode step per new token, every rank
 * choosing the same ids from the same gathered logits.
 *
 * <p>A rank's buffers are its own allocations ({@link #open}), or a function session's, which an image records:
 * {@link #record} splits the model into one recording session per rank (its shard, KV cache, scratch and exchange
 * buffers), and {@link #restored} runs a group over the sessions that restoring those images rebuilt, every launch
 * of a rank through its session (so a restore's gating makes it wait for its own rank's bytes alone). The exchange
 * buffers of a session are packed among its other read-write buffers, so a peer is granted read access to the slabs
 * that hold them (never to a slab of read-only weights, which a rebuilt session maps apart).
 *
 * <p>A rank that fails while issuing releases the others ({@link PeerGroup#run}): the request fails with that
 * rank's error and the model serves the next one. A device fault is sticky: the model is then to be closed.
 * One request at a time.
 */
public final class LlamaTensorParallel implements AutoCloseable {

  /** Bytes of a tensor read at once, whole rows, and dealt to the ranks whose pieces cover them. */
  static final int READ_BLOCK = 64 << 20;

  /** Buffer names of a session rank's exchange buffers: the attention's and the MLP's partials, the logit slice. */
  static final String PARTIAL_ATTN = "tp.partial.attn";
  static final String PARTIAL_MLP = "tp.partial.mlp";
  static final String LOGIT_SLICES = "tp.logit_slices";

  /**
   * A greedy request's outcome.
   *
   * @param tokens each sequence's new ids
   * @param logits the last head's logits per sequence (fp32 [vocab])
   * @param prefillMs wall time from the prompt pass's first launch until its first ids were on every device
   * @param decodeMs wall time of the decode steps after that, until the last ids were on every device
   */
  public record Result(int[][] tokens, float[][] logits, double prefillMs, double decodeMs) {}

  private final LlamaConfig config;
  private final String weights;
  private final int maxBatch;
  private final int maxTokens;
  /** What the model made and frees on close: contexts and streams of its own (none over restored sessions). */
  private final List<GpuContext> contexts;
  private final List<GpuStream> streams;
  private final PeerGroup group;
  private final Rank[] ranks;
  private final AtomicBoolean closed = new AtomicBoolean();

  /** One rank's module, kernels, buffers and passes. */
  private static final class Rank implements AutoCloseable {
    final LlamaShard shard;
    final GpuContext context;
    final LlamaMemory memory;
    /** The session holding the rank's buffers, or null for a rank's own memory. */
    final FunctionSession session;
    /** What closing the rank frees: its own memory or recording session; null for a restored session. */
    final AutoCloseable owned;
    /** A module the rank loaded itself (null through a session, which owns its module). */
    GpuModule module;
    LlamaKernels kernels;
    LlamaFunction.State state;
    LlamaPasses passes;
    LlamaRankFunction.State rankState;

    Rank(LlamaShard shard, GpuContext context, LlamaMemory memory, FunctionSession session, AutoCloseable owned) {
      this.shard = shard;
      this.context = context;
      this.memory = memory;
      this.session = session;
      this.owned = owned;
    }

    @Override
    public void close() {
      if (kernels != null) {
        kernels.close();
      }
      if (module != null) {
        module.close();
      }
      if (owned != null) {
        try {
          owned.close();
        } catch (Exception e) {
          throw new IllegalStateException("freeing a rank's memory failed: " + e.getMessage(), e);
        }
      }
    }
  }

  /**
   * Partials, logit slices and the group through which rank {@code rank}'s passes meet the others'. Through a
   * session, the first gather first makes the rank's stream wait for its logits buffer through the session (a
   * restore's gate): the gather writes it with a kernel of the group, which no gate sees, and a restore copy landing
   * after that write would undo it.
   */
  private static final class RankExchange implements LlamaPasses.Exchange {
    private final PeerGroup group;
    private final int rank;
    private final PeerBuffer[] partials;
    private final PeerBuffer slices;
    private final FunctionSession session;
    private final BufferRef logits;
    private boolean logitsGated;

    RankExchange(PeerGroup group, int rank, PeerBuffer[] partials, PeerBuffer slices, FunctionSession session,
        BufferRef logits) {
      this.group = group;
      this.rank = rank;
      this.partials = partials;
      this.slices = slices;
      this.session = session;
      this.logits = logits;
      this.logitsGated = session == null;
    }

    @Override
    public long partial(int which) {
      return partials[which].address(rank);
    }

    @Override
    public void allReduce(int which, long x, long elements) {
      group.allReduceAdd(rank, partials[which], x, elements, PartialType.FLOAT32);
    }

    @Override
    public long logitSlice() {
      return slices.address(rank);
    }

    @Override
    public void gatherLogits(long out, int rows, int vocab) {
      if (!logitsGated) {
        // Four bytes the gather overwrites; the stream's wait for the buffer holds for all later work on it.
        session.fill(logits, 0, 4, (byte) 0);
        logitsGated = true;
      }
      group.allGatherColumns(rank, slices, out, rows, vocab);
    }
  }

  private LlamaTensorParallel(LlamaConfig config, String weights, int maxBatch, int maxTokens,
      List<GpuContext> contexts, List<GpuStream> streams, PeerGroup group, Rank[] ranks) {
    this.config = config;
    this.weights = weights;
    this.maxBatch = maxBatch;
    this.maxTokens = maxTokens;
    this.contexts = contexts;
    this.streams = streams;
    this.group = group;
    this.ranks = ranks;
  }

  /**
   * The model of {@code weights} split over {@code devices} (rank r on {@code devices[r]}), serving up to maxBatch
   * sequences of up to maxTokens positions (prompt and new tokens).
   *
   * @throws InvalidConfigException if the model does not split over that many ranks (naming the dimension), or the
   *     batch or context is out of range
   * @throws IllegalArgumentException if the devices cannot hold a group: one missing (more ranks than devices),
   *     named twice, or two that are not peers
   * @throws IOException if the weights cannot be read
   */
  public static LlamaTensorParallel open(GpuDriver driver, int[] devices, LlamaWeights weights, int maxBatch,
      int maxTokens) throws IOException {
    return open(driver, devices, weights, maxBatch, maxTokens, (rank, module) -> module);
  }

  /**
   * As {@link #open}, rank r's kernels launched through {@code moduleView.apply(r, module)} of its module (tests
   * inject faults with it).
   */
  static LlamaTensorParallel open(GpuDriver driver, int[] devices, LlamaWeights weights, int maxBatch, int maxTokens,
      BiFunction<Integer, GpuModule, GpuModule> moduleView) throws IOException {
    LlamaConfig c = weights.config();
    int n = devices.length;
    check(driver, devices, c, maxBatch, maxTokens);
    List<GpuContext> contexts = new ArrayList<>();
    List<GpuStream> streams = new ArrayList<>();
    PeerGroup group = null;
    Rank[] ranks = new Rank[n];
    try {
      for (int d : devices) {
        GpuContext ctx = driver.createContext(d);
        contexts.add(ctx);
        streams.add(ctx.createStream());
      }
      group = PeerGroup.open(streams);
      for (int r = 0; r < n; r++) {
        RankMemory memory = new RankMemory(contexts.get(r));
        ranks[r] = new Rank(new LlamaShard(c, r, n), contexts.get(r), memory, null, memory);
      }
      upload(weights, ranks, group);
      PeerBuffer[] partials = null;
      PeerBuffer slices = null;
      if (n > 1) {
        long rows = (long) maxBatch * maxTokens;
        partials = new PeerBuffer[] {group.allocate(PARTIAL_ATTN, 4 * rows * c.hiddenSize()),
            group.allocate(PARTIAL_MLP, 4 * rows * c.hiddenSize())};
        int widest = 0;
        for (Rank rank : ranks) {
          widest = Math.max(widest, rank.shard.vocabWidth());
        }
        slices = group.allocate(LOGIT_SLICES, 4L * maxBatch * widest);
      }
      for (int r = 0; r < n; r++) {
        Rank rank = ranks[r];
        GpuContext ctx = contexts.get(r);
        rank.module = ctx.loadPtx(LlamaKernels.ptx(ctx.device()));
        rank.kernels = new LlamaKernels(moduleView.apply(r, rank.module), c.type(), ctx.device());
        LlamaFunction.Scratch scratch = LlamaFunction.allocateScratch(rank.memory, rank.shard, maxBatch, maxTokens);
        List<BufferRef> k = new ArrayList<>();
        List<BufferRef> v = new ArrayList<>();
        LlamaFunction.allocateCache(rank.memory, rank.shard, maxBatch, maxTokens, k, v);
        rank.state = new LlamaFunction.State(c, weights.describe(), maxBatch, maxTokens, LlamaFunction.MODULE,
            scratch, k, v, null, "a tensor-parallel model takes token ids", null, List.of());
        rank.passes = new LlamaPasses(rank.memory, rank.kernels, streams.get(r), rank.state, rank.shard,
            n == 1 ? null : new RankExchange(group, r, partials, slices, null, null));
      }
      return new LlamaTensorParallel(c, weights.describe(), maxBatch, maxTokens, List.copyOf(contexts),
          List.copyOf(streams), group, ranks);
    } catch (RuntimeException | IOException | Error e) {
      release(group, ranks, streams, contexts);
      throw e;
    }
  }

  /**
   * As {@link #open}, every rank's buffers and module in a recording {@link FunctionSession} on its device (what an
   * image of the rank records), its exchange buffers among them, for 2 to 4 ranks. The model owns the sessions and
   * their contexts: snapshot the sessions ({@link #session}, {@link #rankState}) before closing it.
   *
   * @throws InvalidConfigException as {@link #open}, or for fewer than two ranks (one rank is {@link LlamaFunction})
   */
  public static LlamaTensorParallel record(GpuDriver driver, int[] devices, LlamaWeights weights, int maxBatch,
      int maxTokens) throws IOException {
    LlamaConfig c = weights.config();
    int n = devices.length;
    if (n < 2) {
      throw new InvalidConfigException("a recorded group has 2 or more ranks, not " + n + ": one device is "
          + "LlamaFunction's image");
    }
    check(driver, devices, c, maxBatch, maxTokens);
    List<GpuContext> contexts = new ArrayList<>();
    List<GpuStream> streams = new ArrayList<>();
    PeerGroup group = null;
    Rank[] ranks = new Rank[n];
    try {
      List<FunctionSession> sessions = new ArrayList<>();
      for (int r = 0; r < n; r++) {
        GpuContext ctx = driver.createContext(devices[r]);
        contexts.add(ctx);
        FunctionSession session = FunctionSession.record(ctx);
        ranks[r] = new Rank(new LlamaShard(c, r, n), ctx, LlamaMemory.of(session), session, session);
        sessions.add(session);
        session.loadModule(LlamaFunction.MODULE, LlamaKernels.ptx(ctx.device()));
      }
      group = PeerGroup.open(sessions.stream().map(FunctionSession::stream).toList());
      upload(weights, ranks, group);
      long rows = (long) maxBatch * maxTokens;
      int widest = 0;
      for (Rank rank : ranks) {
        widest = Math.max(widest, rank.shard.vocabWidth());
      }
      for (Rank rank : ranks) {
        LlamaFunction.State model = allocateRank(rank, weights.describe(), maxBatch, maxTokens);
        rank.rankState = new LlamaRankFunction.State(model, rank.shard.rank(), n,
            rank.memory.allocate(PARTIAL_ATTN, 4 * rows * c.hiddenSize()),
            rank.memory.allocate(PARTIAL_MLP, 4 * rows * c.hiddenSize()),
            rank.memory.allocate(LOGIT_SLICES, 4L * maxBatch * widest));
      }
      connect(group, ranks);
      return new LlamaTensorParallel(c, weights.describe(), maxBatch, maxTokens, List.copyOf(contexts), List.of(),
          group, ranks);
    } catch (RuntimeException | IOException | Error e) {
      release(group, ranks, streams, contexts);
      throw e;
    }
  }

  /**
   * The group of the ranks whose images rebuilt {@code sessions} (rank r's session and host state at r), each on its
   * own device: re-grants each rank's exchange buffers to the other ranks' devices (a restore maps a session for its
   * own device only) and runs every launch of a rank through its session. The sessions and their contexts stay the
   * caller's (the restores'); closing the model frees the group alone.
   *
   * @throws IllegalArgumentException if the states are not the ranks 0 to n-1 of one model, or the devices cannot
   *     hold a group
   */
  public static LlamaTensorParallel restored(List<FunctionSession> sessions, List<LlamaRankFunction.State> states) {
    int n = sessions.size();
    if (states.size() != n || n < 2) {
      throw new IllegalArgumentException(n + " sessions and " + states.size() + " rank states: a group needs one "
          + "state per session, two or more");
    }
    LlamaFunction.State first = states.get(0).model();
    int[] devices = new int[n];
    for (int r = 0; r < n; r++) {
      LlamaRankFunction.State s = states.get(r);
      if (s.rank() != r || s.ranks() != n) {
        throw new IllegalArgumentException("the state at " + r + " is rank " + s.rank() + " of " + s.ranks()
            + ", not rank " + r + " of " + n);
      }
      if (!s.model().config().equals(first.config()) || s.model().maxBatch() != first.maxBatch()
          || s.model().maxTokens() != first.maxTokens() || !s.model().weights().equals(first.weights())) {
        throw new IllegalArgumentException("rank " + r + " is of another model than rank 0: "
            + s.model().config().name() + " from " + s.model().weights() + " (" + s.model().maxBatch() + " x "
            + s.model().maxTokens() + ") against " + first.config().name() + " from " + first.weights() + " ("
            + first.maxBatch() + " x " + first.maxTokens() + ")");
      }
      devices[r] = sessions.get(r).context().device().ordinal();
    }
    GpuDriver driver = sessions.get(0).context().driver();
    String why = PeerGroup.whyUnusable(driver, devices);
    if (why != null) {
      throw new IllegalArgumentException("cannot run " + first.config().name() + "'s ranks on devices "
          + Arrays.toString(devices) + ": " + why);
    }
    PeerGroup group = null;
    Rank[] ranks = new Rank[n];
    try {
      group = PeerGroup.open(sessions.stream().map(FunctionSession::stream).toList());
      for (int r = 0; r < n; r++) {
        FunctionSession session = sessions.get(r);
        ranks[r] = new Rank(new LlamaShard(first.config(), r, n), session.context(), LlamaMemory.of(session),
            session, null);
        ranks[r].rankState = states.get(r);
        ranks[r].state = states.get(r).model();
      }
      connect(group, ranks);
      return new LlamaTensorParallel(first.config(), first.weights(), first.maxBatch(), first.maxTokens(), List.of(),
          List.of(), group, ranks);
    } catch (RuntimeException | Error e) {
      release(group, ranks, List.of(), List.of());
      throw e;
    }
  }

  /** What {@link #open} and {@link #record} check before they allocate anything. */
  private static void check(GpuDriver driver, int[] devices, LlamaConfig c, int maxBatch, int maxTokens) {
    LlamaShard.check(c, devices.length);
    if (maxBatch < 1 || maxBatch > LlamaFunction.MAX_BATCH_LIMIT) {
      throw new InvalidConfigException("maxBatch must be in [1, " + LlamaFunction.MAX_BATCH_LIMIT + "], not "
          + maxBatch);
    }
    int limit = LlamaFunction.contextLimit(c);
    if (maxTokens < 1 || maxTokens > limit) {
      throw new InvalidConfigException("maxTokens must be in [1, " + limit + "], not " + maxTokens);
    }
    c.checkContext(maxTokens);
    String why = PeerGroup.whyUnusable(driver, devices);
    if (why != null) {
      throw new IllegalArgumentException("cannot split " + c.name() + " over devices " + Arrays.toString(devices)
          + ": " + why);
    }
  }

  /** A session rank's scratch and KV cache, allocated in its session; its host state. */
  private static LlamaFunction.State allocateRank(Rank rank, String weights, int maxBatch, int maxTokens) {
    LlamaFunction.Scratch scratch = LlamaFunction.allocateScratch(rank.memory, rank.shard, maxBatch, maxTokens);
    List<BufferRef> k = new ArrayList<>();
    List<BufferRef> v = new ArrayList<>();
    LlamaFunction.allocateCache(rank.memory, rank.shard, maxBatch, maxTokens, k, v);
    rank.state = new LlamaFunction.State(rank.shard.config(), weights, maxBatch, maxTokens, LlamaFunction.MODULE,
        scratch, k, v, null, "a tensor-parallel model takes token ids", null, List.of());
    return rank.state;
  }

  /**
   * Grants each session rank's exchange buffers to the other ranks' devices and makes every rank's kernels (through
   * its session) and passes.
   */
  private static void connect(PeerGroup group, Rank[] ranks) {
    int n = ranks.length;
    long[][] at = new long[3][n];
    long[] bytes = {Long.MAX_VALUE, Long.MAX_VALUE, Long.MAX_VALUE};
    for (int r = 0; r < n; r++) {
      LlamaRankFunction.State s = ranks[r].rankState;
      BufferRef[] refs = {s.partialAttn(), s.partialMlp(), s.logitSlices()};
      for (int b = 0; b < refs.length; b++) {
        FunctionSession session = ranks[r].session;
        at[b][r] = session.address(refs[b]);
        bytes[b] = Math.min(bytes[b], session.size(refs[b]));
        grantPeers(ranks, r, at[b][r], session.size(refs[b]));
      }
    }
    PeerBuffer[] partials = {PeerBuffer.over(PARTIAL_ATTN, bytes[0], at[0]),
        PeerBuffer.over(PARTIAL_MLP, bytes[1], at[1])};
    PeerBuffer slices = PeerBuffer.over(LOGIT_SLICES, bytes[2], at[2]);
    for (int r = 0; r < n; r++) {
      Rank rank = ranks[r];
      LlamaConfig c = rank.shard.config();
      rank.kernels = new LlamaKernels(new SessionModule(rank.session, LlamaFunction.MODULE, LlamaKernels.EMBED),
          c.type(), rank.context.device());
      rank.passes = new LlamaPasses(rank.memory, rank.kernels, rank.session.stream(), rank.state, rank.shard,
          new RankExchange(group, r, partials, slices, rank.session, rank.state.scratch().logits()));
    }
  }

  /** Read access for every other rank's device to the slabs of rank {@code r}'s session that hold these bytes. */
  private static void grantPeers(Rank[] ranks, int r, long address, long bytes) {
    for (FunctionSession.MappedSlab slab : ranks[r].session.slabs()) {
      long start = slab.mapping().address();
      if (start < address + bytes && address < start + slab.mapping().size()) {
        for (int q = 0; q < ranks.length; q++) {
          int peer = ranks[q].context.device().ordinal();
          if (q != r && slab.mapping().accessFor(peer) == null) {
            slab.mapping().setAccessFor(peer, MemoryAccess.READ);
          }
        }
      }
    }
  }

  /** The recording session of rank {@code rank} (a model made by {@link #record} or {@link #restored}). */
  public FunctionSession session(int rank) {
    FunctionSession s = ranks[rank].session;
    if (s == null) {
      throw new IllegalStateException("rank " + rank + "'s buffers are its own, in no session");
    }
    return s;
  }

  /** Rank {@code rank}'s host state, what its image records (a model made by {@link #record} or {@link #restored}). */
  public LlamaRankFunction.State rankState(int rank) {
    LlamaRankFunction.State s = ranks[rank].rankState;
    if (s == null) {
      throw new IllegalStateException("rank " + rank + "'s buffers are its own, in no session");
    }
    return s;
  }

  /**
   * Every rank's shard from {@code weights}: each tensor read once, in blocks of whole rows, each block's rows dealt
   * to the ranks whose pieces cover them (a column piece gathered row by row) through each rank's pinned staging, one
   * thread per rank; the next block is read while the ranks deal the last one.
   */
  private static void upload(LlamaWeights weights, Rank[] ranks, PeerGroup group) throws IOException {
    record Target(int rank, Piece piece, long device) {}
    Map<Integer, List<Target>> byTensor = new HashMap<>();
    for (int r = 0; r < ranks.length; r++) {
      for (Weight w : ranks[r].shard.weights()) {
        long at = ranks[r].memory.address(ranks[r].memory.allocate(w.name(), w.bytes()));
        for (Piece p : w.pieces()) {
          byTensor.computeIfAbsent(p.tensor().index(), i -> new ArrayList<>()).add(new Target(r, p, at));
          at += p.bytes();
        }
      }
    }
    StagedUpload[] staging = new StagedUpload[ranks.length];
    ExecutorService dealers = Executors.newFixedThreadPool(ranks.length, task -> {
      Thread t = new Thread(task, "thaw-tp-upload");
      t.setDaemon(true);
      return t;
    });
    List<Future<?>> dealing = List.of();
    try {
      for (int r = 0; r < ranks.length; r++) {
        staging[r] = new StagedUpload(ranks[r].context, group.stream(r), LlamaFunction.STAGING_BYTES);
      }
      ByteBuffer[] blocks = new ByteBuffer[2];
      int next = 0;
      for (LlamaTensor t : LlamaTensor.all(weights.config())) {
        List<Target> targets = byTensor.get(t.index());
        if (targets == null) {
          continue;
        }
        long columns = targets.get(0).piece().tensorColumns();
        long rows = t.elements() / columns;
        long rowBytes = 2 * columns;
        long perBlock = Math.max(1, READ_BLOCK / rowBytes);
        for (long r0 = 0; r0 < rows; r0 += perBlock) {
          long r1 = Math.min(rows, r0 + perBlock);
          int bytes = (int) ((r1 - r0) * rowBytes);
          if (blocks[next] == null || blocks[next].capacity() < bytes) {
            blocks[next] = ByteBuffer.allocateDirect(Math.max(bytes, READ_BLOCK)).order(ByteOrder.LITTLE_ENDIAN);
          }
          ByteBuffer block = blocks[next].clear().limit(bytes);
          weights.read(t, r0 * rowBytes, block);
          // The ranks are done with the other block before this one is dealt (and before it is read again).
          await(dealing);
          List<Future<?>> started = new ArrayList<>();
          for (int r = 0; r < ranks.length; r++) {
            StagedUpload rankStaging = staging[r];
            List<Target> mine = new ArrayList<>();
            for (Target target : targets) {
              if (target.rank() == r) {
                mine.add(target);
              }
            }
            long first = r0;
            started.add(dealers.submit(() -> {
              for (Target target : mine) {
                Piece p = target.piece();
                long a = Math.max(first, p.firstRow());
                long b = Math.min(r1, p.firstRow() + p.rows());
                if (a < b) {
                  rankStaging.copy(target.device() + 2 * (a - p.firstRow()) * p.columns(), 2 * (b - a) * p.columns(),
                      (offset, view) -> gather(block, first, columns, p, a, offset, view));
                }
              }
              return null;
            }));
          }
          dealing = started;
          next ^= 1;
        }
      }
      await(dealing);
    } finally {
      // Every dealer has stopped before the staging it copies through is freed: a dealing not started never will
      // (shutdownNow drops it, and its future never completes: it is not waited for), one under way ends.
      dealers.shutdownNow();
      awaitTermination(dealers);
      for (StagedUpload s : staging) {
        if (s != null) {
          s.close();
        }
      }
    }
  }

  /** Waits for every task; throws the first one's failure as it was thrown. */
  private static void await(List<Future<?>> tasks) throws IOException {
    for (Future<?> f : tasks) {
      try {
        f.get();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IOException("interrupted while uploading the weights", e);
      } catch (ExecutionException e) {
        Throwable cause = e.getCause();
        if (cause instanceof IOException io) {
          throw io;
        }
        if (cause instanceof RuntimeException re) {
          throw re;
        }
        if (cause instanceof Error err) {
          throw err;
        }
        throw new IOException(cause);
      }
    }
  }

  /** Waits until every task {@code pool} started has ended; an interrupt is kept for the caller, not obeyed. */
  private static void awaitTermination(ExecutorService pool) {
    boolean interrupted = false;
    while (true) {
      try {
        if (pool.awaitTermination(1, TimeUnit.SECONDS)) {
          break;
        }
      } catch (InterruptedException e) {
        interrupted = true;
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * Fills {@code view} with the piece's elements from {@code offset} bytes into its rows from {@code row}, out of
   * {@code block}: whole rows of the tensor ({@code columns} wide) from row {@code blockRow}.
   */
  private static void gather(ByteBuffer block, long blockRow, long columns, Piece p, long row, long offset,
      ByteBuffer view) {
    long e = offset / 2;
    int left = view.remaining() / 2;
    while (left > 0) {
      long r = row + e / p.columns();
      long col = e % p.columns();
      int run = (int) Math.min(left, p.columns() - col);
      int from = (int) (2 * ((r - blockRow) * columns + p.firstColumn() + col));
      view.put(block.slice(from, 2 * run));
      e += run;
      left -= run;
    }
  }

  public LlamaConfig config() {
    return config;
  }

  /** Where the weights came from ({@link LlamaWeights#describe}). */
  public String weights() {
    return weights;
  }

  public int ranks() {
    return ranks.length;
  }

  public int maxBatch() {
    return maxBatch;
  }

  public int maxTokens() {
    return maxTokens;
  }

  /**
   * Device bytes rank {@code rank} holds: its shard, KV cache and scratch; through a session, its exchange buffers
   * too.
   */
  public long deviceBytes(int rank) {
    return ranks[rank].memory.bytes();
  }

  /**
   * Greedy generation: {@code maxNewTokens} ids per prompt, and the last step's logits.
   *
   * @throws dev.thaw.runtime.function.InvalidRequestException if the prompts or length do not fit the model (too
   *     many, too long, an id outside the vocabulary), before anything is launched
   * @throws RuntimeException the first failing rank's error, once every rank has stopped issuing
   */
  public synchronized Result generate(int[][] prompts, int maxNewTokens) {
    checkOpen();
    TokenRequest req = LlamaFunction.parse(ranks[0].state, TokenRequest.body(prompts, maxNewTokens, true));
    Generation gen = new Generation(req);
    Generation.Inputs in = gen.inputs();
    int batch = gen.batch();
    int steps = req.maxNewTokens();
    int longest = 0;
    for (int[] p : req.prompts()) {
      longest = Math.max(longest, p.length);
    }
    int longestPrompt = longest;
    try {
      group.run(r -> {
        Rank rank = ranks[r];
        LlamaFunction.Scratch sc = rank.state.scratch();
        rank.memory.upload(sc.tokens(), Generation.ints(in.tokens()));
        rank.memory.upload(sc.positions(), Generation.ints(in.positions()));
        rank.memory.upload(sc.cacheRows(), Generation.ints(in.cacheRows()));
      });
      long start = System.nanoTime();
      group.run(r -> {
        LlamaPasses p = ranks[r].passes;
        p.forward(gen.promptRows(), 0, 0, 0, 0);
        for (int b = 0; b < batch; b++) {
          p.finalNorm(gen.lastRow(b), b, 1);
        }
        p.head(batch, gen.stepOutput(0));
      });
      group.synchronize();
      long prefilled = System.nanoTime();
      group.run(r -> {
        LlamaPasses p = ranks[r].passes;
        for (int step = 1; step < steps; step++) {
          p.forward(batch, gen.stepRows(step), gen.stepRows(step), gen.decodeCacheRows(), longestPrompt + step);
          p.finalNorm(0, 0, batch);
          p.head(batch, gen.stepOutput(step));
        }
      });
      group.synchronize();
      long decoded = System.nanoTime();
      return new Result(ids(gen, batch, steps), logits(batch), (prefilled - start) / 1e6, (decoded - prefilled) / 1e6);
    } catch (RuntimeException e) {
      // The ranks that did not fail have queued work up to an exchange: let it finish before the next request.
      try {
        group.synchronize();
      } catch (RuntimeException s) {
        e.addSuppressed(s);
      }
      throw e;
    }
  }

  /** The new ids, the same on every rank (each took the argmax of the same gathered logits). */
  private int[][] ids(Generation gen, int batch, int steps) {
    int[][] out = null;
    for (int r = 0; r < ranks.length; r++) {
      int[][] got = new int[batch][steps];
      if (steps > 0) {
        ByteBuffer b = ByteBuffer.allocateDirect(4 * steps * batch).order(ByteOrder.LITTLE_ENDIAN);
        ranks[r].memory.download(ranks[r].state.scratch().tokens(), 4L * gen.promptRows(), b);
        for (int s = 0; s < steps; s++) {
          for (int q = 0; q < batch; q++) {
            got[q][s] = b.getInt(4 * (s * batch + q));
          }
        }
      }
      if (out == null) {
        out = got;
      } else if (!Arrays.deepEquals(out, got)) {
        throw new IllegalStateException("rank " + r + " chose " + Arrays.deepToString(got) + " where rank 0 chose "
            + Arrays.deepToString(out) + ": the ranks' gathered logits differ");
      }
    }
    return out;
  }

  private float[][] logits(int batch) {
    int v = config.vocabSize();
    ByteBuffer b = ByteBuffer.allocateDirect(4 * batch * v).order(ByteOrder.LITTLE_ENDIAN);
    ranks[0].memory.download(ranks[0].state.scratch().logits(), 0, b);
    float[][] out = new float[batch][v];
    for (int q = 0; q < batch; q++) {
      for (int i = 0; i < v; i++) {
        out[q][i] = b.getFloat(4 * (q * v + i));
      }
    }
    return out;
  }

  private void checkOpen() {
    if (closed.get()) {
      throw new IllegalStateException("the tensor-parallel model is closed");
    }
  }

  /** Waits for every rank, then frees the group, the shards and the contexts. Idempotent. */
  @Override
  public void close() {
    if (closed.compareAndSet(false, true)) {
      try {
        group.synchronize();
      } finally {
        release(group, ranks, streams, contexts);
      }
    }
  }

  private static void release(PeerGroup group, Rank[] ranks, List<GpuStream> streams, List<GpuContext> contexts) {
    if (group != null) {
      group.close();
    }
    for (Rank r : ranks) {
      if (r != null) {
        r.close();
      }
    }
    streams.forEach(GpuStream::close);
    contexts.forEach(GpuContext::close);
  }

  @Override
  public String toString() {
    return "LlamaTensorParallel[" + config.name() + " over " + ranks.length + " ranks, " + weights + "]";
  }
}
