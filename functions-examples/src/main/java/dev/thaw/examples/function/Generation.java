package dev.thaw.examples.function;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.ResponseStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The host side of greedy generation over ragged prompts, as the language-model examples lay it out on the
 * device: three int buffers, {@code tokens}, {@code positions} and {@code cacheRows}. The prompt pass reads
 * rows [0, promptRows) of each (sequence b's prompt token t at its own position t, cache row b); step s
 * (from 1) reads its batch rows at {@link #stepRows}: the ids step s − 1 chose, which the argmax of step
 * s − 1 wrote at {@link #stepOutput}(s − 1). So ids stay on the device and the host waits once, at the end.
 * {@code tokens} needs promptRows + steps × batch ints (the last step's ids too), the others promptRows +
 * (steps − 1) × batch, and cacheRows promptRows + batch.
 *
 * <p>A streamed request ({@link ResponseStream#streamed()}) brings every step's ids to the host and sends them as a
 * part ({@link #part}); a cancelled one ends after the step under way.
 */
public final class Generation {

  private final TokenRequest request;
  private final ResponseStream stream;
  private final int batch;
  private final int promptRows;
  private final int[] lastRow;
  /** With {@link #perStep()}: each sequence's ids so far, whether it stopped, its picks' log-probabilities. */
  private final List<List<Integer>> ids = new ArrayList<>();
  private final boolean[] stopped;
  private boolean cancelled;
  private final List<List<Sampling.Pick>> picks = new ArrayList<>();
  private final List<Map<Integer, Integer>> counts = new ArrayList<>();

  public Generation(TokenRequest request) {
    this(request, ResponseStream.unstreamed());
  }

  public Generation(TokenRequest request, ResponseStream stream) {
    this.request = request;
    this.stream = stream;
    this.batch = request.prompts().length;
    int rows = 0;
    for (int[] p : request.prompts()) {
      rows += p.length;
    }
    this.promptRows = rows;
    this.lastRow = new int[batch];
    this.stopped = new boolean[batch];
    for (int b = 0; b < batch; b++) {
      ids.add(new ArrayList<>());
      picks.add(new ArrayList<>());
      counts.add(new HashMap<>());
    }
  }

  /**
   * True when every step's ids come to the host: to pick them there (sampling, penalties, log-probabilities), or to
   * see a stop token and end early. Else the ids stay on the device and the host waits once, at the end.
   */
  public boolean perStep() {
    return !request.sampling().greedy() || request.sampling().stopTokens().length > 0 || stream.streamed();
  }

  /**
   * After step {@code step}'s head (0: the prompt's) has written its logits and its argmax: with {@link #perStep()},
   * the host picks each sequence's token from the logits and writes it where the next step reads it, or reads the
   * device's picks; a sequence that picked a stop token ends (its rows still run, unread).
   *
   * @return false when every sequence has ended: no step follows
   */
  public boolean afterHead(FunctionSession session, int step, BufferRef tokens, BufferRef logits, int vocab) {
    if (!perStep()) {
      return true;
    }
    if (step >= request.maxNewTokens()) {
      return false;
    }
    if (stream.cancelled()) {
      cancelled = true;
      return false;
    }
    Sampling sampling = request.sampling();
    int[] chosen = new int[batch];
    if (sampling.greedy()) {
      ByteBuffer got = ByteBuffer.allocateDirect(4 * batch).order(ByteOrder.LITTLE_ENDIAN);
      session.download(tokens, stepOutput(step), got);
      for (int b = 0; b < batch; b++) {
        chosen[b] = got.getInt(4 * b);
      }
    } else {
      ByteBuffer l = ByteBuffer.allocateDirect(4 * batch * vocab).order(ByteOrder.LITTLE_ENDIAN);
      session.download(logits, 0, l);
      float[] row = new float[vocab];
      for (int b = 0; b < batch; b++) {
        if (stopped[b]) {
          List<Integer> own = ids.get(b);
          chosen[b] = own.get(own.size() - 1);
          continue;
        }
        l.asFloatBuffer().get(b * vocab, row, 0, vocab);
        Sampling.Pick p = sampling.pick(row, counts.get(b), b, step);
        chosen[b] = p.id();
        picks.get(b).add(p);
      }
      session.upload(tokens, stepOutput(step), ints(chosen));
    }
    boolean going = false;
    int[][] added = new int[batch][];
    Sampling.Pick[][] addedPicks = new Sampling.Pick[batch][];
    for (int b = 0; b < batch; b++) {
      added[b] = new int[0];
      addedPicks[b] = new Sampling.Pick[0];
      if (!stopped[b]) {
        ids.get(b).add(chosen[b]);
        counts.get(b).merge(chosen[b], 1, Integer::sum);
        stopped[b] = sampling.stops(chosen[b]);
        going |= !stopped[b];
        added[b] = new int[] {chosen[b]};
        List<Sampling.Pick> own = picks.get(b);
        addedPicks[b] = own.size() == ids.get(b).size() ? new Sampling.Pick[] {own.get(own.size() - 1)}
            : new Sampling.Pick[0];
      }
    }
    if (stream.streamed()) {
      stream.part(part(added, sampling.logprobs() >= 0 ? addedPicks : null));
    }
    return going;
  }

  /**
   * A streamed part: per sequence of the request, the ids it added since the last part ({@code {"tokens": [[id], [],
   * ...]}}: an empty list for one that added none) and, when the request asked for them, their log-probabilities in
   * the response's form ({@code "logprobs"}).
   */
  public static ObjectNode part(int[][] added, Sampling.Pick[][] picks) {
    ObjectNode part = JsonNodeFactory.instance.objectNode();
    ArrayNode tokens = part.putArray("tokens");
    for (int[] seq : added) {
      ArrayNode row = tokens.addArray();
      for (int id : seq) {
        row.add(id);
      }
    }
    if (picks != null) {
      ArrayNode lp = part.putArray("logprobs");
      for (Sampling.Pick[] seq : picks) {
        ArrayNode row = lp.addArray();
        for (Sampling.Pick p : seq) {
          logprob(row.addObject(), p);
        }
      }
    }
    return part;
  }

  /** One token's log-probability and its alternatives: {@code {"logprob": x, "top": [[id, logprob], ...]}}. */
  public static void logprob(ObjectNode into, Sampling.Pick p) {
    into.put("logprob", p.logprob());
    ArrayNode top = into.putArray("top");
    for (int i = 0; i < p.topIds().length; i++) {
      top.addArray().add(p.topIds()[i]).add(p.topLogprobs()[i]);
    }
  }

  public int batch() {
    return batch;
  }

  public int promptRows() {
    return promptRows;
  }

  /** The prompt row holding sequence b's last token: where its first head reads. */
  public int lastRow(int b) {
    return lastRow[b];
  }

  /** Byte offset, in tokens and positions, of step {@code step}'s (≥ 1) input rows. */
  public long stepRows(int step) {
    return 4L * (promptRows + (long) (step - 1) * batch);
  }

  /** Byte offset, in tokens, of the ids step {@code step} (0 = the prompt's head) chooses. */
  public long stepOutput(int step) {
    return 4L * (promptRows + (long) step * batch);
  }

  /** Byte offset, in cacheRows, of the decode steps' rows (0, 1, ..., batch − 1). */
  public long decodeCacheRows() {
    return 4L * promptRows;
  }

  /** Writes the prompt ids, every position and every cache row; complete when it returns. */
  public void upload(FunctionSession session, BufferRef tokens, BufferRef positions, BufferRef cacheRows) {
    Inputs in = inputs();
    session.upload(tokens, 0, ints(in.tokens()));
    session.upload(positions, 0, ints(in.positions()));
    // Synchronous copies are complete when they return, so the kernels after them read these inputs.
    session.upload(cacheRows, 0, ints(in.cacheRows()));
  }

  /**
   * What the io buffers start with: the prompt ids, every row's position (the prompt's, then each step's), and every
   * row's cache row (the prompt's, then the steps' 0 .. batch − 1).
   */
  public record Inputs(int[] tokens, int[] positions, int[] cacheRows) {}

  /** The request's {@link Inputs}; also fixes {@link #lastRow}. */
  public Inputs inputs() {
    int steps = request.maxNewTokens();
    int[] tok = new int[promptRows];
    int[] pos = new int[promptRows + Math.max(0, steps - 1) * batch];
    int[] rows = new int[promptRows + batch];
    int m = 0;
    for (int b = 0; b < batch; b++) {
      int[] p = request.prompts()[b];
      for (int t = 0; t < p.length; t++, m++) {
        tok[m] = p[t];
        pos[m] = t;
        rows[m] = b;
      }
      lastRow[b] = m - 1;
      rows[promptRows + b] = b;
      for (int step = 1; step < steps; step++) {
        pos[promptRows + (step - 1) * batch + b] = p.length + step - 1;
      }
    }
    return new Inputs(tok, pos, rows);
  }

  /**
   * {@code {"tokens": [[...], ...]}} from the device, and {@code "logits"} (the last head's, fp32 [batch, vocab])
   * when the request asked; waits for the request's device work either way.
   */
  public ObjectNode response(FunctionSession session, BufferRef tokens, BufferRef logits, int vocab) {
    if (perStep()) {
      return perStepResponse(session, logits, vocab);
    }
    int steps = request.maxNewTokens();
    ObjectNode out = JsonNodeFactory.instance.objectNode();
    ArrayNode ids = out.putArray("tokens");
    ByteBuffer gen = ByteBuffer.allocateDirect(4 * Math.max(1, steps * batch)).order(ByteOrder.LITTLE_ENDIAN);
    if (steps > 0) {
      session.download(tokens, 4L * promptRows, gen.limit(4 * steps * batch));
    }
    for (int b = 0; b < batch; b++) {
      ArrayNode row = ids.addArray();
      for (int step = 0; step < steps; step++) {
        row.add(gen.getInt(4 * (step * batch + b)));
      }
    }
    if (request.returnLogits()) {
      ByteBuffer l = ByteBuffer.allocateDirect(4 * batch * vocab).order(ByteOrder.LITTLE_ENDIAN);
      session.download(logits, 0, l);
      ArrayNode all = out.putArray("logits");
      for (int b = 0; b < batch; b++) {
        ArrayNode row = all.addArray();
        for (int v = 0; v < vocab; v++) {
          row.add(l.getFloat(4 * (b * vocab + v)));
        }
      }
    } else {
      // Nothing to download: still wait, so the request's device work is done when it returns.
      session.synchronize();
    }
    return out;
  }

  /**
   * The ids the host saw step by step, each sequence's {@code finish} ({@code "stop"} at a stop token, else
   * {@code "length"}) and, when asked, each token's log-probability with its alternatives.
   */
  private ObjectNode perStepResponse(FunctionSession session, BufferRef logits, int vocab) {
    ObjectNode out = JsonNodeFactory.instance.objectNode();
    ArrayNode all = out.putArray("tokens");
    ArrayNode finish = out.putArray("finish");
    for (int b = 0; b < batch; b++) {
      ArrayNode row = all.addArray();
      ids.get(b).forEach(row::add);
      finish.add(stopped[b] ? "stop" : cancelled ? "cancelled" : "length");
    }
    if (request.sampling().logprobs() >= 0) {
      ArrayNode lp = out.putArray("logprobs");
      for (int b = 0; b < batch; b++) {
        ArrayNode row = lp.addArray();
        for (Sampling.Pick p : picks.get(b)) {
          logprob(row.addObject(), p);
        }
      }
    }
    if (request.returnLogits()) {
      ByteBuffer l = ByteBuffer.allocateDirect(4 * batch * vocab).order(ByteOrder.LITTLE_ENDIAN);
      session.download(logits, 0, l);
      ArrayNode rows = out.putArray("logits");
      for (int b = 0; b < batch; b++) {
        ArrayNode row = rows.addArray();
        for (int v = 0; v < vocab; v++) {
          row.add(l.getFloat(4 * (b * vocab + v)));
        }
      }
    } else {
      session.synchronize();
    }
    return out;
  }

  /** {@code v} as little-endian ints, position 0, limit its length. */
  public static ByteBuffer ints(int[] v) {
    ByteBuffer b = ByteBuffer.allocateDirect(4 * Math.max(1, v.length)).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < v.length; i++) {
      b.putInt(4 * i, v[i]);
    }
    return b.limit(4 * v.length);
  }
}
