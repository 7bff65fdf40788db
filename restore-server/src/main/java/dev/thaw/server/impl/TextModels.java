package dev.thaw.server.impl;

import com.knuddels.jtokkit.Encodings;
import com.knuddels.jtokkit.api.Encoding;
import com.knuddels.jtokkit.api.EncodingRegistry;
import com.knuddels.jtokkit.api.IntArrayList;
import dev.thaw.runtime.function.FunctionLoader;
import dev.thaw.runtime.function.FunctionSignature.LanguageModel;
import dev.thaw.runtime.function.HostStates;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.function.Tokenizer;
import dev.thaw.runtime.text.ChatTemplate;
import dev.thaw.runtime.text.TemplateException;
import dev.thaw.server.ServeException;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executor;

/**
 * The text side of the language-model functions, per image: its tokenizer (the function's own, read from the files
 * its state names, or one of tiktoken's by name) and its compiled chat template. Loading reads files (a Llama 3
 * tokenizer.json is 9 MB), so it runs on {@code loader} once per image and the result is kept.
 */
final class TextModels {

  private static final EncodingRegistry TIKTOKEN = Encodings.newLazyEncodingRegistry();

  /** What a request needs of an image's text side. */
  record Text(Tokenizer tokenizer, ChatTemplate chat) {}

  private final Executor loader;
  private final Map<String, CompletableFuture<Text>> byTag = new ConcurrentHashMap<>();

  TextModels(Executor loader) {
    this.loader = loader;
  }

  /** The image's text side; fails with a ServeException when it has no tokenizer, or its files do not read. */
  CompletableFuture<Text> of(ImageInfo image, LanguageModel lm) {
    return byTag.computeIfAbsent(image.tag() + "@" + image.manifest().build().created(),
        k -> CompletableFuture.supplyAsync(() -> load(image, lm), loader));
  }

  private static Text load(ImageInfo image, LanguageModel lm) {
    Tokenizer tokenizer = own(image).orElseGet(() -> tiktoken(lm.encoding()));
    ChatTemplate chat = null;
    if (lm.chat() != null) {
      try {
        chat = ChatTemplate.compile(lm.chat().template());
      } catch (TemplateException e) {
        // Served without chat: completions still work, and a chat request says why it cannot.
        chat = null;
      }
    }
    return new Text(tokenizer, chat);
  }

  private static Optional<Tokenizer> own(ImageInfo image) {
    try {
      return tokenizer(FunctionLoader.load(image.manifest().function().className()), image);
    } catch (RuntimeException e) {
      throw new ServeException(500, "no_tokenizer", "the tokenizer of '" + image.tag() + "' cannot be read: "
          + e.getMessage());
    }
  }

  private static <S> Optional<Tokenizer> tokenizer(ThawFunction<S> f, ImageInfo image) {
    return f.tokenizer(HostStates.read(image.manifest().hostState(), f.stateType()));
  }

  private static Tokenizer tiktoken(String name) {
    if (name == null) {
      return null;
    }
    Encoding e = TIKTOKEN.getEncoding(name).orElse(null);
    return e == null ? null : new Tiktoken(e);
  }

  /** One of tiktoken's encodings (GPT-2's {@code r50k_base}): no special tokens added, {@code <|endoftext|>} special. */
  private record Tiktoken(Encoding encoding) implements Tokenizer {
    @Override
    public int[] encode(String text, boolean addSpecial) {
      return encoding.encode(text).toArray();
    }

    @Override
    public String decode(int[] ids, boolean skipSpecial) {
      IntArrayList l = new IntArrayList(ids.length);
      for (int id : ids) {
        if (!(skipSpecial && special(id))) {
          l.add(id);
        }
      }
      return new String(encoding.decodeBytes(l), StandardCharsets.UTF_8);
    }

    @Override
    public byte[] bytes(int id) {
      IntArrayList l = new IntArrayList(1);
      l.add(id);
      try {
        return encoding.decodeBytes(l);
      } catch (RuntimeException e) {
        return new byte[0];
      }
    }

    @Override
    public boolean special(int id) {
      return id == 50256 && encoding.getName().equals("r50k_base");
    }
  }
}
