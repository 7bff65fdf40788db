package dev.thaw.examples.function;

import dev.thaw.runtime.function.BufferRef;

/**
 * The device side of a language model as {@link TokenEngine} drives it: a KV cache of {@link #slots()} rows of
 * {@link #maxTokens()} positions each (one sequence per row, each at its own length), the three int buffers a pass
 * reads its rows from, and one pass. The language-model examples lay their scratch out this way ({@link Generation}).
 */
public interface TokenModel {

  /** KV-cache rows: the most sequences in flight at once. */
  int slots();

  /** Positions per KV-cache row: a sequence's prompt plus its new tokens fit in this many. */
  int maxTokens();

  int vocab();

  /** Per row of a pass: its token id, then (from row {@code rows}) the argmax of each head. Ints. */
  BufferRef tokens();

  /** Per row of a pass: its position in its sequence. Ints. */
  BufferRef positions();

  /** Per row of a pass: its sequence's KV-cache row. Ints. */
  BufferRef cacheRows();

  /** Per head of a pass: its logits, fp32 [heads, vocab]. */
  BufferRef logits();

  /**
   * Queues one pass over rows [0, rows) of {@link #tokens()}, {@link #positions()} and {@link #cacheRows()} (each row
   * appends its key and value to its KV-cache row at its position and attends to that row up to it), then, for each
   * head i, the final norm of row {@code heads[i]}, its logits into row i of {@link #logits()} and their argmax into
   * {@code tokens[rows + i]}. A prompt pass has {@code decodeKeys} 0 (rows of one sequence consecutive); a decode step
   * has one row per sequence, no row attending to more than {@code decodeKeys} positions. Nothing is waited for.
   */
  default void pass(int rows, int[] heads, int decodeKeys) {
    forward(rows, decodeKeys);
    boolean inOrder = heads.length == rows;
    for (int i = 0; i < heads.length && inOrder; i++) {
      inOrder = heads[i] == i;
    }
    if (inOrder) {
      finalNorm(0, 0, rows);
    } else {
      for (int i = 0; i < heads.length; i++) {
        finalNorm(heads[i], i, 1);
      }
    }
    head(heads.length, 4L * rows);
  }

  /** The layers over rows [0, rows) of the io buffers: a prompt pass for {@code decodeKeys} 0, else a decode step. */
  void forward(int rows, int decodeKeys);

  /** The final norm of {@code n} rows of the residual stream from row {@code row} into head rows from {@code into}. */
  void finalNorm(int row, int into, int n);

  /** Logits of the first {@code n} head rows, their argmax into the tokens buffer at byte {@code idsAt}. */
  void head(int n, long idsAt);
}
