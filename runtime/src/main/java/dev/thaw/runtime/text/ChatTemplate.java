package dev.thaw.runtime.text;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A model's chat template (the Jinja {@code chat_template} of its {@code tokenizer_config.json}), rendered as
 * transformers' {@code apply_chat_template} renders it: Jinja with {@code trim_blocks} and {@code lstrip_blocks},
 * the variables {@code messages}, {@code add_generation_prompt}, the special tokens ({@code bos_token},
 * {@code eos_token}, ...) and any extra ones ({@code tools}, {@code date_string}), and the globals
 * {@code raise_exception} and {@code strftime_now}; {@code tojson} writes as Python's {@code json.dumps} with
 * {@code ensure_ascii=False}. Compiled once; thread-safe.
 */
public final class ChatTemplate {

  private final Jinja template;

  private ChatTemplate(Jinja template) {
    this.template = template;
  }

  /**
   * Parses {@code source}.
   *
   * @throws TemplateException naming the line of a construct it does not read
   */
  public static ChatTemplate compile(String source) {
    return new ChatTemplate(Jinja.compile(source));
  }

  /**
   * The prompt for {@code messages} (each a map: {@code role}, {@code content} and whatever else the template reads).
   *
   * @param specialTokens {@code bos_token}, {@code eos_token}, ...: variables of the template
   * @param extra further variables ({@code tools}, ...), or an empty map
   * @throws TemplateException if the template refuses the conversation ({@link TemplateException#raised()}) or fails
   */
  public String render(List<? extends Map<String, ?>> messages, boolean addGenerationPrompt,
      Map<String, String> specialTokens, Map<String, ?> extra) {
    Map<String, Object> context = new LinkedHashMap<>(specialTokens);
    context.putAll(extra);
    context.put("messages", messages);
    context.put("add_generation_prompt", addGenerationPrompt);
    return template.render(context, Builtins.globals());
  }
}
