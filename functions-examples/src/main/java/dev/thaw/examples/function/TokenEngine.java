package dev.thaw.examples.function;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionEngine;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.ResponseStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.function.UnaryOperator;
import java.util.stream.IntStream;

/**
 * Continuous batching for a language model ({@link TokenModel}): every sequence in flight shares each decode step, and
 * requests join and leave between steps. Each sequence holds one KV-cache row (a slot) from its prompt pass to its
 * end, at its own length; a request is admitted once its sequences all have a slot (first come, first served), so
 * the cache is never asked for more than it has: a request beyond it waits here (and a server in front queues, then
 * refuses, the rest), it never runs out of memory.
 *
 * <p>One thread owns the session. Each iteration: cancelled requests leave; waiting requests are admitted while slots
 * and the prompt budget last, and their prompts run in one pass (an engine with nothing in flight starts its first
 * request alone, so that the first token of a request that finds it idle never waits for the prompts that arrive with
 * it); then one decode step runs every sequence that has a token to feed. After each pass the host picks each
 * sequence's token ({@link Sampling}: greedy ones take the device's argmax, sampled ones their logits row), sends each
 * streamed request its part ({@link Generation#part}), and ends sequences at a stop token, at {@code maxNewTokens}
 * or when their request is cancelled, freeing their slots. A request's response is what {@link Generation} answers for
 * it alone, except that a cancelled one's sequences finish {@code "cancelled"}.
 *
 * <p>A sequence's draws are a function of its request's seed, its index in the request and its step, as alone: a
 * batch changes only what the kernels round differently at another row count.
 */
public final class TokenEngine implements FunctionEngine {

  /** A request checked: what to generate, and what to add to its response (a decoded text). */
  public record Parsed(TokenRequest request, UnaryOperator<ObjectNode> finish) {}

  /** Prompt rows of one pass, unless a single request's are more: bounds how long a join stalls the decode steps. */
  public static final int DEFAULT_PREFILL_ROWS = 2048;

  private final FunctionSession session;
  private final TokenModel model;
  private final Function<JsonNode, Parsed> parser;
  private final int prefillRows;
  private final LinkedBlockingQueue<Job> inbox = new LinkedBlockingQueue<>();
  private final Thread thread;
  private volatile boolean closed;

  // ---- the engine thread's own ----
  private final ArrayDeque<Job> waiting = new ArrayDeque<>();
  private final List<Job> running = new ArrayList<>();
  private final ArrayDeque<Integer> freeSlots = new ArrayDeque<>();
  private ByteBuffer ints = ByteBuffer.allocateDirect(4096).order(ByteOrder.LITTLE_ENDIAN);
  private ByteBuffer floats = ByteBuffer.allocateDirect(4096).order(ByteOrder.LITTLE_ENDIAN);

  /** One request in the engine. */
  private static final class Job {
    final TokenRequest request;
    final UnaryOperator<ObjectNode> finish;
    final ResponseStream stream;
    final CompletableFuture<FunctionResponse> result = new CompletableFuture<>();
    final Seq[] seqs;
    boolean cancelled;

    Job(Parsed parsed, ResponseStream stream) {
      this.request = parsed.request();
      this.finish = parsed.finish();
      this.stream = stream;
      int[][] prompts = request.prompts();
      this.seqs = new Seq[prompts.length];
      for (int b = 0; b < prompts.length; b++) {
        seqs[b] = new Seq(this, b, prompts[b]);
      }
    }

    boolean done() {
      for (Seq s : seqs) {
        if (s.finish == null) {
          return false;
        }
      }
      return true;
    }

    int promptRows() {
      int rows = 0;
      for (Seq s : seqs) {
        rows += s.prompt.length;
      }
      return rows;
    }
  }

  /** One sequence: its slot, the ids it generated, its picks and counts (for penalties), how it ended. */
  private static final class Seq {
    final Job job;
    final int index;
    final int[] prompt;
    final List<Integer> ids = new ArrayList<>();
    final List<Sampling.Pick> picks = new ArrayList<>();
    final Map<Integer, Integer> counts = new HashMap<>();
    int slot = -1;
    String finish;
    float[] lastLogits;
    /** Ids added since the job's last part. */
    int unsent;

    Seq(Job job, int index, int[] prompt) {
      this.job = job;
      this.index = index;
      this.prompt = prompt;
    }

    Sampling sampling() {
      return job.request.sampling();
    }

    /** True when its token is picked on the host from its logits (penalties, bias, sampling, log-probabilities). */
    boolean sampled() {
      return !sampling().greedy();
    }
  }

  /**
   * @param parser checks a request's JSON (throwing {@code InvalidRequestException}) on the submitting thread
   * @param prefillRows prompt rows of one pass (a single larger request still runs, alone)
   */
  public TokenEngine(FunctionSession session, TokenModel model, Function<JsonNode, Parsed> parser, int prefillRows,
      String name) {
    if (prefillRows < 1) {
      throw new IllegalArgumentException("prefillRows must be at least 1: " + prefillRows);
    }
    this.session = session;
    this.model = model;
    this.parser = parser;
    this.prefillRows = prefillRows;
    for (int i = 0; i < model.slots(); i++) {
      freeSlots.add(i);
    }
    this.thread = new Thread(this::loop, "thaw-engine-" + name);
    thread.setDaemon(true);
    thread.start();
  }

  @Override
  public CompletableFuture<FunctionResponse> submit(FunctionRequest request, ResponseStream stream) {
    Parsed parsed = parser.apply(request.json());
    Job job = new Job(parsed, stream);
    synchronized (this) {
      if (closed) {
        throw new IllegalStateException("the engine is closed");
      }
      inbox.add(job);
    }
    return job.result;
  }

  @Override
  public void close() {
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
    }
    thread.interrupt();
    try {
      thread.join(TimeUnit.SECONDS.toMillis(30));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    List<Job> left = new ArrayList<>();
    inbox.drainTo(left);
    IllegalStateException gone = new IllegalStateException("the engine closed before the request was served");
    left.forEach(j -> j.result.completeExceptionally(gone));
  }

  // ---- the engine's thread ----

  private void loop() {
    try {
      while (!closed) {
        if (running.isEmpty() && waiting.isEmpty()) {
          waiting.add(inbox.take());
        }
        inbox.drainTo(waiting);
        iterate();
      }
    } catch (InterruptedException e) {
      // Closed.
    } finally {
      IllegalStateException gone = new IllegalStateException("the engine closed before the request was served");
      for (Job j : running) {
        j.result.completeExceptionally(gone);
      }
      for (Job j : waiting) {
        j.result.completeExceptionally(gone);
      }
      running.clear();
      waiting.clear();
    }
  }

  /** One iteration: the cancelled leave, the waiting join (their prompt pass), then one decode step. */
  private void iterate() {
    for (Job j : running) {
      if (j.stream.cancelled() && !j.cancelled) {
        j.cancelled = true;
        for (Seq s : j.seqs) {
          end(s, "cancelled");
        }
      }
    }
    for (Job j : List.copyOf(waiting)) {
      if (j.stream.cancelled()) {
        waiting.remove(j);
        j.cancelled = true;
        for (Seq s : j.seqs) {
          s.finish = "cancelled";
        }
        complete(j);
      }
    }
    boolean idle = running.isEmpty();
    List<Seq> joining = admit(idle);
    try {
      if (!joining.isEmpty()) {
        prefill(joining);
        // The first tokens leave before the decode step: a joining request's first token waits for its prompt alone.
        sendParts();
      }
      List<Seq> decoding = new ArrayList<>();
      for (Job j : running) {
        for (Seq s : j.seqs) {
          if (s.finish == null) {
            decoding.add(s);
          }
        }
      }
      if (!decoding.isEmpty()) {
        decode(decoding);
      }
      sendParts();
    } catch (RuntimeException | Error e) {
      // The device failed under these requests: they fail; the others (waiting) are untouched.
      for (Job j : running) {
        for (Seq s : j.seqs) {
          release(s);
        }
        j.result.completeExceptionally(e);
      }
      running.clear();
      return;
    }
    for (Job j : List.copyOf(running)) {
      if (j.done()) {
        running.remove(j);
        complete(j);
      }
    }
  }

  /**
   * Takes waiting requests, first come first served, while their sequences find slots and their prompts the pass's
   * budget (at least the head's); an idle engine takes the head alone.
   */
  private List<Seq> admit(boolean idle) {
    List<Seq> joining = new ArrayList<>();
    int rows = 0;
    while (!waiting.isEmpty()) {
      Job j = waiting.peek();
      if (j.seqs.length > freeSlots.size() || (!joining.isEmpty() && rows + j.promptRows() > prefillRows)) {
        break;
      }
      waiting.poll();
      if (j.request.maxNewTokens() == 0 && !j.request.returnLogits()) {
        // Nothing to generate and nothing to return from the device.
        for (Seq s : j.seqs) {
          s.finish = "length";
        }
        complete(j);
        continue;
      }
      for (Seq s : j.seqs) {
        s.slot = freeSlots.poll();
        joining.add(s);
      }
      rows += j.promptRows();
      running.add(j);
      if (idle) {
        break;
      }
    }
    return joining;
  }

  /** One prompt pass for the joining sequences; each picks its first token from its prompt's last row. */
  private void prefill(List<Seq> joining) {
    List<Seq> heads = sampledFirst(joining);
    int rows = 0;
    for (Seq s : heads) {
      rows += s.prompt.length;
    }
    int[] tok = new int[rows];
    int[] pos = new int[rows];
    int[] cache = new int[rows];
    int[] headRows = new int[heads.size()];
    int m = 0;
    for (int h = 0; h < heads.size(); h++) {
      Seq s = heads.get(h);
      for (int t = 0; t < s.prompt.length; t++, m++) {
        tok[m] = s.prompt[t];
        pos[m] = t;
        cache[m] = s.slot;
      }
      headRows[h] = m - 1;
    }
    pass(rows, tok, pos, cache, heads, headRows, 0);
  }

  /** One decode step: each sequence feeds the token it picked last, at the position after its last. */
  private void decode(List<Seq> decoding) {
    List<Seq> heads = sampledFirst(decoding);
    int n = heads.size();
    int[] tok = new int[n];
    int[] pos = new int[n];
    int[] cache = new int[n];
    int[] headRows = new int[n];
    int keys = 0;
    for (int i = 0; i < n; i++) {
      Seq s = heads.get(i);
      tok[i] = s.ids.get(s.ids.size() - 1);
      pos[i] = s.prompt.length + s.ids.size() - 1;
      cache[i] = s.slot;
      headRows[i] = i;
      keys = Math.max(keys, pos[i] + 1);
    }
    pass(n, tok, pos, cache, heads, headRows, keys);
  }

  /** The sequences whose tokens the host picks first: their logits rows are then [0, sampled) of the pass. */
  private static List<Seq> sampledFirst(List<Seq> seqs) {
    List<Seq> out = new ArrayList<>(seqs.size());
    for (Seq s : seqs) {
      if (s.sampled()) {
        out.add(s);
      }
    }
    for (Seq s : seqs) {
      if (!s.sampled()) {
        out.add(s);
      }
    }
    return out;
  }

  /** Uploads the rows, runs the pass, and gives each head sequence its next token. */
  private void pass(int rows, int[] tok, int[] pos, int[] cache, List<Seq> heads, int[] headRows, int decodeKeys) {
    upload(model.tokens(), tok);
    upload(model.positions(), pos);
    // Synchronous copies are complete when they return (and the stream is idle: the last pass was waited for).
    upload(model.cacheRows(), cache);
    model.pass(rows, headRows, decodeKeys);
    int n = heads.size();
    ByteBuffer ids = ints(n);
    session.download(model.tokens(), 4L * rows, ids);
    int sampled = 0;
    while (sampled < n && heads.get(sampled).sampled()) {
      sampled++;
    }
    int vocab = model.vocab();
    float[][] rowsOf = new float[n][];
    if (sampled > 0) {
      ByteBuffer l = floats(sampled * vocab);
      session.download(model.logits(), 0, l);
      for (int i = 0; i < sampled; i++) {
        rowsOf[i] = new float[vocab];
        l.asFloatBuffer().get(i * vocab, rowsOf[i], 0, vocab);
      }
    }
    int[] chosen = new int[n];
    Sampling.Pick[] picks = new Sampling.Pick[n];
    IntStream range = IntStream.range(0, sampled);
    (sampled > 1 ? range.parallel() : range).forEach(i -> {
      Seq s = heads.get(i);
      float[] logits = s.job.request.returnLogits() ? rowsOf[i].clone() : rowsOf[i];
      picks[i] = s.sampling().pick(logits, s.counts, s.index, s.ids.size());
      chosen[i] = picks[i].id();
    });
    for (int i = sampled; i < n; i++) {
      chosen[i] = ids.getInt(4 * i);
    }
    for (int i = 0; i < n; i++) {
      Seq s = heads.get(i);
      if (s.job.request.maxNewTokens() == 0) {
        s.lastLogits = logitsRow(i, rowsOf[i]);
        end(s, "length");
        continue;
      }
      s.ids.add(chosen[i]);
      s.unsent++;
      s.counts.merge(chosen[i], 1, Integer::sum);
      if (picks[i] != null) {
        s.picks.add(picks[i]);
      }
      boolean stop = s.sampling().stops(chosen[i]);
      if (stop || s.ids.size() >= s.job.request.maxNewTokens()) {
        if (s.job.request.returnLogits()) {
          s.lastLogits = logitsRow(i, rowsOf[i]);
        }
        end(s, stop ? "stop" : "length");
      }
    }
  }

  /** Head i's raw logits: the copy downloaded for picking, or its row downloaded now. */
  private float[] logitsRow(int i, float[] downloaded) {
    if (downloaded != null) {
      return downloaded;
    }
    int vocab = model.vocab();
    ByteBuffer l = floats(vocab);
    session.download(model.logits(), 4L * i * vocab, l);
    float[] row = new float[vocab];
    l.asFloatBuffer().get(0, row, 0, vocab);
    return row;
  }

  /** Ends a sequence (if it runs) and frees its slot. */
  private void end(Seq s, String finish) {
    if (s.finish == null) {
      s.finish = finish;
    }
    release(s);
  }

  private void release(Seq s) {
    if (s.slot >= 0) {
      freeSlots.add(s.slot);
      s.slot = -1;
    }
  }

  /** Each streamed request with new ids gets one part: per sequence, the ids since its last part. */
  private void sendParts() {
    for (Job j : running) {
      if (!j.stream.streamed() || j.cancelled) {
        continue;
      }
      boolean any = false;
      for (Seq s : j.seqs) {
        any |= s.unsent > 0;
      }
      if (!any) {
        continue;
      }
      int[][] added = new int[j.seqs.length][];
      Sampling.Pick[][] picks = j.request.sampling().logprobs() >= 0 ? new Sampling.Pick[j.seqs.length][] : null;
      for (int b = 0; b < j.seqs.length; b++) {
        Seq s = j.seqs[b];
        int from = s.ids.size() - s.unsent;
        added[b] = s.ids.subList(from, s.ids.size()).stream().mapToInt(Integer::intValue).toArray();
        if (picks != null) {
          picks[b] = s.picks.subList(from, s.ids.size()).toArray(new Sampling.Pick[0]);
        }
        s.unsent = 0;
      }
      j.stream.part(Generation.part(added, picks));
    }
  }

  /** Answers a request: its ids, finishes, log-probabilities and logits as {@link Generation} writes them. */
  private void complete(Job j) {
    TokenRequest r = j.request;
    ObjectNode out = JsonNodeFactory.instance.objectNode();
    ArrayNode tokens = out.putArray("tokens");
    for (Seq s : j.seqs) {
      ArrayNode row = tokens.addArray();
      s.ids.forEach(row::add);
    }
    if (!r.sampling().greedy() || r.sampling().stopTokens().length > 0 || j.cancelled) {
      ArrayNode finish = out.putArray("finish");
      for (Seq s : j.seqs) {
        finish.add(s.finish);
      }
    }
    if (r.sampling().logprobs() >= 0) {
      ArrayNode lp = out.putArray("logprobs");
      for (Seq s : j.seqs) {
        ArrayNode row = lp.addArray();
        for (Sampling.Pick p : s.picks) {
          Generation.logprob(row.addObject(), p);
        }
      }
    }
    if (r.returnLogits()) {
      ArrayNode all = out.putArray("logits");
      for (Seq s : j.seqs) {
        ArrayNode row = all.addArray();
        if (s.lastLogits != null) {
          for (float v : s.lastLogits) {
            row.add(v);
          }
        }
      }
    }
    FunctionResponse response;
    try {
      response = FunctionResponse.of(j.finish.apply(out));
    } catch (RuntimeException e) {
      j.result.completeExceptionally(e);
      return;
    }
    j.result.complete(response);
  }

  private void upload(BufferRef ref, int[] v) {
    ByteBuffer b = ints(v.length);
    for (int i = 0; i < v.length; i++) {
      b.putInt(4 * i, v[i]);
    }
    session.upload(ref, 0, b);
  }

  /** A host buffer of {@code n} ints, position 0 and limit 4n, reused between passes. */
  private ByteBuffer ints(int n) {
    if (ints.capacity() < 4 * n) {
      ints = ByteBuffer.allocateDirect(Integer.highestOneBit(Math.max(1, 4 * n)) << 1).order(ByteOrder.LITTLE_ENDIAN);
    }
    return ints.clear().limit(4 * n);
  }

  private ByteBuffer floats(int n) {
    long bytes = 4L * n;
    if (floats.capacity() < bytes) {
      floats = ByteBuffer.allocateDirect((int) Math.min(Integer.MAX_VALUE - 8, Long.highestOneBit(bytes) << 1))
          .order(ByteOrder.LITTLE_ENDIAN);
    }
    return floats.clear().limit((int) bytes);
  }
}
