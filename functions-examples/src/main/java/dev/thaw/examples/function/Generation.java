package dev.thaw.examples.function;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionSession;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The host side of greedy generation over ragged prompts, as the language-model examples lay it out on the
 * device: three int buffers, {@code tokens}, {@code positions} and {@code cacheRows}. The prompt pass reads
 * rows [0, promptRows) of each (sequence b's prompt token t at its own position t, cache row b); step s
 * (from 1) reads its batch rows at {@link #stepRows}: the ids step s − 1 chose, which the argmax of step
 * s − 1 wrote at {@link #stepOutput}(s − 1). So ids stay on the device and the host waits once, at the end.
 * {@code tokens} needs promptRows + steps × batch ints (the last step's ids too), the others promptRows +
 * (steps − 1) × batch, and cacheRows promptRows + batch.
 */
public final class Generation {

  private final TokenRequest request;
  private final int batch;
  private final int promptRows;
  private final int[] lastRow;

  public Generation(TokenRequest request) {
    this.request = request;
    this.batch = request.prompts().length;
    int rows = 0;
    for (int[] p : request.prompts()) {
      rows += p.length;
    }
    this.promptRows = rows;
    this.lastRow = new int[batch];
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
    session.upload(tokens, 0, ints(tok));
    session.upload(positions, 0, ints(pos));
    // Synchronous copies are complete when they return, so the kernels after them read these inputs.
    session.upload(cacheRows, 0, ints(rows));
  }

  /**
   * {@code {"tokens": [[...], ...]}} from the device, and {@code "logits"} (the last head's, fp32 [batch, vocab])
   * when the request asked; waits for the request's device work either way.
   */
  public ObjectNode response(FunctionSession session, BufferRef tokens, BufferRef logits, int vocab) {
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

  private static ByteBuffer ints(int[] v) {
    ByteBuffer b = ByteBuffer.allocateDirect(4 * Math.max(1, v.length)).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < v.length; i++) {
      b.putInt(4 * i, v[i]);
    }
    return b.limit(4 * v.length);
  }
}
