package dev.thaw.examples.llama;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.examples.collective.CollectiveKernels;
import dev.thaw.examples.llama.LlamaShard.Piece;
import dev.thaw.examples.llama.LlamaShard.Weight;
import dev.thaw.runtime.function.InvalidConfigException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The tensor-parallel split of a Llama-family checkpoint: over the ranks, the pieces of every split tensor tile it
 * exactly (no element twice, none left out), every replicated one is whole on every rank, a rank's query heads read
 * only its own key-value heads, and a split the kernels cannot run is refused naming the dimension.
 */
class LlamaShardTest {

  @ParameterizedTest(name = "{0} over {1}")
  @CsvSource({"tiny, 1", "tiny, 2", "llama-3.1-8b, 2", "llama-3.1-8b, 4", "qwen2.5-0.5b, 2", "mistral-7b, 4",
      "llama-3.2-1b, 4"})
  void theRanksPiecesTileEverySplitTensorAndEveryRankHoldsTheReplicatedOnes(String name, int ranks) {
    LlamaConfig c = LlamaConfig.named(name);
    Map<String, List<Piece>> byTensor = new HashMap<>();
    Map<String, Integer> wholeCopies = new HashMap<>();
    long held = 0;
    for (int r = 0; r < ranks; r++) {
      LlamaShard shard = new LlamaShard(c, r, ranks);
      for (Weight w : shard.weights()) {
        held += w.bytes();
        for (Piece p : w.pieces()) {
          long rows = p.tensor().elements() / p.tensorColumns();
          assertTrue(p.firstRow() >= 0 && p.rows() > 0 && p.firstRow() + p.rows() <= rows, p + " has rows outside");
          assertTrue(p.firstColumn() >= 0 && p.columns() > 0 && p.firstColumn() + p.columns() <= p.tensorColumns(),
              p + " has columns outside");
          if (p.rows() * p.columns() == p.tensor().elements()) {
            wholeCopies.merge(p.tensor().name(), 1, Integer::sum);
          } else {
            byTensor.computeIfAbsent(p.tensor().name(), k -> new ArrayList<>()).add(p);
          }
        }
      }
    }
    long replicated = 0;
    for (LlamaTensor t : LlamaTensor.all(c)) {
      List<Piece> pieces = byTensor.getOrDefault(t.name(), List.of());
      if (pieces.isEmpty()) {
        assertEquals(ranks, wholeCopies.getOrDefault(t.name(), 0), t.name() + " is not whole on every rank");
        replicated += t.bytes();
        continue;
      }
      long area = 0;
      for (int i = 0; i < pieces.size(); i++) {
        area += pieces.get(i).rows() * pieces.get(i).columns();
        for (int j = i + 1; j < pieces.size(); j++) {
          assertTrue(!overlap(pieces.get(i), pieces.get(j)), pieces.get(i) + " overlaps " + pieces.get(j));
        }
      }
      assertEquals(t.elements(), area, t.name() + "'s pieces leave elements out");
      assertEquals(ranks, pieces.size(), t.name() + " is not one piece per rank");
    }
    long total = LlamaTensor.all(c).stream().mapToLong(LlamaTensor::bytes).sum();
    assertEquals(total + (ranks - 1) * replicated, held, "bytes held over the ranks");
  }

  private static boolean overlap(Piece a, Piece b) {
    return a.firstRow() < b.firstRow() + b.rows() && b.firstRow() < a.firstRow() + a.rows()
        && a.firstColumn() < b.firstColumn() + b.columns() && b.firstColumn() < a.firstColumn() + a.columns();
  }

  @Test
  void aRanksQueryHeadsReadOnlyItsOwnKeyValueHeadsAndItsVocabularySliceIsTheGathersSlice() {
    LlamaConfig c = LlamaConfig.named("llama-3.1-8b");
    int ranks = 4;
    int group = c.heads() / c.kvHeads();
    int vocab = 0;
    for (int r = 0; r < ranks; r++) {
      LlamaShard s = new LlamaShard(c, r, ranks);
      Weight qkv = s.weights().stream().filter(w -> w.name().equals(LlamaFunction.qkvWeight(0))).findFirst()
          .orElseThrow();
      Piece q = qkv.pieces().get(0);
      Piece k = qkv.pieces().get(1);
      Piece v = qkv.pieces().get(2);
      assertEquals(s.qkvWidth(), q.rows() + k.rows() + v.rows());
      assertEquals(k.firstRow(), v.firstRow());
      long firstHead = q.firstRow() / c.headDim();
      long lastHead = (q.firstRow() + q.rows()) / c.headDim() - 1;
      assertEquals(k.firstRow() / c.headDim(), firstHead / group, "rank " + r + "'s first query head's kv head");
      assertEquals((k.firstRow() + k.rows()) / c.headDim() - 1, lastHead / group, "rank " + r + "'s last");
      assertEquals(CollectiveKernels.sliceStart(c.vocabSize(), r, ranks), s.vocabStart());
      Piece head = s.weights().get(s.weights().size() - 1).pieces().get(0);
      assertEquals("lm_head.weight", head.tensor().name());
      assertEquals(s.vocabStart(), head.firstRow());
      assertEquals(s.vocabWidth(), head.rows());
      assertTrue(head.contiguous(), "a vocabulary slice is one run of the checkpoint's bytes");
      assertTrue(!s.weights().stream().filter(w -> w.name().endsWith("o_proj.weight")).findFirst().orElseThrow()
          .pieces().get(0).contiguous(), "an o_proj column block is strided");
      vocab += s.vocabWidth();
    }
    assertEquals(c.vocabSize(), vocab);
  }

  @Test
  void aSplitTheKernelsCannotRunIsRefusedNamingTheDimension() {
    assertRefused("tiny-qwen2", 2, "num_key_value_heads = 1 does not split over 2 ranks");
    assertRefused("qwen2.5-0.5b", 4, "num_attention_heads = 14 does not split over 4 ranks");
    assertRefused("tiny", 4, "num_key_value_heads = 2 does not split over 4 ranks");
    assertRefused("llama-3.1-8b", 8, "1 to " + CollectiveKernels.MAX_RANKS + " ranks, not 8");
    assertRefused("llama-3.1-8b", 0, "1 to " + CollectiveKernels.MAX_RANKS + " ranks, not 0");
    // 16 query heads of 64 over 4 ranks: 256 wide; an MLP width of 4 * 48 leaves each rank 48, not a K step.
    LlamaConfig narrow = new LlamaConfig("narrow", LlamaConfig.Architecture.LLAMA, 1024, 1, 16, 4, 64, 192, 1000, 64,
        1e-5f, 10000, null, false, false, 0, null);
    InvalidConfigException e = assertThrows(InvalidConfigException.class, () -> LlamaShard.check(narrow, 4));
    assertTrue(e.getMessage().contains("intermediate_size / ranks = 48"), e.getMessage());
    IllegalArgumentException rank = assertThrows(IllegalArgumentException.class,
        () -> new LlamaShard(LlamaConfig.named("tiny"), 2, 2));
    assertEquals("rank 2 of 2", rank.getMessage());
  }

  private static void assertRefused(String name, int ranks, String reason) {
    InvalidConfigException e = assertThrows(InvalidConfigException.class,
        () -> new LlamaShard(LlamaConfig.named(name), 0, ranks));
    assertTrue(e.getMessage().contains(reason), e.getMessage());
  }

  @ParameterizedTest
  @ValueSource(strings = {"tiny", "tiny-qwen2", "llama-3.1-8b", "qwen2.5-7b"})
  void oneRanksShardIsTheFunctionsFusedLayoutSoOnePassServesBoth(String name) {
    LlamaConfig c = LlamaConfig.named(name);
    List<Weight> shard = new LlamaShard(c, 0, 1).weights();
    List<LlamaFunction.DeviceWeight> function = LlamaFunction.deviceWeights(c);
    assertEquals(function.size(), shard.size(), name);
    for (int i = 0; i < shard.size(); i++) {
      Weight w = shard.get(i);
      assertEquals(function.get(i).name(), w.name());
      assertEquals(function.get(i).bytes(), w.bytes(), w.name());
      assertEquals(function.get(i).parts(), w.pieces().stream().map(Piece::tensor).toList(), w.name());
      for (Piece p : w.pieces()) {
        assertEquals(p.tensor().elements(), p.rows() * p.columns(), p + " is the whole tensor");
      }
    }
  }
}
