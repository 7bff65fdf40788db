package dev.thaw.runtime.function;

/**
 * Text to token ids and back for a language model ({@link ThawFunction#tokenizer}): what a serving protocol that
 * speaks text (OpenAI's completions and chat) needs of the function's vocabulary. Thread-safe.
 */
public interface Tokenizer {

  /**
   * The ids of {@code text}.
   *
   * @param addSpecial add the special tokens the tokenizer puts around a sequence (Llama 3's begin-of-text); a
   *     prompt rendered by a chat template already holds its own, so it is encoded without
   */
  int[] encode(String text, boolean addSpecial);

  /** The text of {@code ids}, special tokens left out when {@code skipSpecial}; broken UTF-8 reads as U+FFFD. */
  String decode(int[] ids, boolean skipSpecial);

  /** The bytes token {@code id} stands for (a special token's text in UTF-8); empty for an id it does not know. */
  byte[] bytes(int id);

  /** True for a special (control) token: decoding with {@code skipSpecial} leaves it out. */
  boolean special(int id);
}
