package dev.thaw.runtime.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The renderer against Jinja2 itself: {@code cases.json} holds, for chat templates written in the Llama 3, Qwen2
 * and Mistral families' layouts (and one that leans on whitespace control), each case's rendering by Jinja2 with
 * transformers' settings ({@code scripts/llm/chat_cases.py} made it), or the error the template raised.
 */
class ChatTemplateTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  private static String resource(String name) throws Exception {
    try (InputStream in = ChatTemplateTest.class.getResourceAsStream(name)) {
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }
  }

  @Test
  void rendersEveryCaseAsJinja2Does() throws Exception {
    JsonNode cases = JSON.readTree(resource("cases.json"));
    List<String> failures = new ArrayList<>();
    int checked = 0;
    for (JsonNode c : cases) {
      ChatTemplate t = ChatTemplate.compile(resource(c.get("template").asText()));
      List<Map<String, Object>> messages = JSON.convertValue(c.get("messages"), new TypeReference<>() {});
      Map<String, String> special = JSON.convertValue(c.get("special"), new TypeReference<>() {});
      Map<String, Object> extra = c.has("extra") ? JSON.convertValue(c.get("extra"), new TypeReference<>() {})
          : Map.of();
      String what = c.get("template").asText() + " / " + c.get("name").asText();
      try {
        String got = t.render(messages, c.get("add_generation_prompt").asBoolean(), special, extra);
        if (!c.has("expected")) {
          failures.add(what + ": rendered, but Jinja2 raised " + c.get("error").asText());
        } else if (!got.equals(c.get("expected").asText())) {
          failures.add(what + ":\n  expected " + JSON.writeValueAsString(c.get("expected").asText()) + "\n  got      "
              + JSON.writeValueAsString(got));
        }
      } catch (TemplateException e) {
        if (c.has("expected")) {
          failures.add(what + ": " + e.getMessage());
        } else {
          assertTrue(e.raised(), what + ": " + e.getMessage());
          assertTrue(c.get("error").asText().endsWith(e.getMessage()), what + ": " + e.getMessage());
        }
      }
      checked++;
    }
    assertEquals(28, checked);
    assertTrue(failures.isEmpty(), String.join("\n", failures));
  }

  @Test
  void expressionsFollowPythonAndJinja() {
    assertEquals("3|1|2.5|-2|[1, 2]|True|ab|x",
        render("{{ 1 + 2 }}|{{ 7 // 4 }}|{{ 5 / 2 }}|{{ -7 // 4 }}|{{ [1] + [2] }}|{{ 'a' in 'cat' }}|{{ 'a' ~ 'b' }}|"
            + "{{ none or 'x' }}"));
    assertEquals("b,c|c|a-b|2|yes", render("{{ ['a','b','c'][1:] | join(',') }}|{{ 'abc'[-1] }}|"
        + "{{ 'a b'.split() | join('-') }}|{{ {'x': 1, 'y': 2} | length }}|{{ 'yes' if 2 is even else 'no' }}"));
    assertEquals("0:a 1:b ", render("{% for k in ['a', 'b'] %}{{ loop.index0 }}:{{ k }} {% endfor %}"));
    assertEquals("x=1 y=2 ", render("{% for k, v in {'x': 1, 'y': 2}.items() %}{{ k }}={{ v }} {% endfor %}"));
    assertEquals("2", render("{% set ns = namespace(n=0) %}{% for i in range(2) %}{% set ns.n = ns.n + 1 %}"
        + "{% endfor %}{{ ns.n }}"));
    // A loop body's set stays in the loop; an if's does not.
    assertEquals("0|1", render("{% set n = 0 %}{% for i in [1] %}{% set n = 5 %}{% endfor %}{{ n }}|"
        + "{% if true %}{% set n = 1 %}{% endif %}{{ n }}"));
    assertEquals("1 3 ", render("{% for i in range(5) %}{% if i == 4 %}{% break %}{% endif %}{% if i is even %}"
        + "{% continue %}{% endif %}{{ i }} {% endfor %}"));
    assertEquals("<b>hi</b>", render("{% macro b(t, tag='b') %}<{{ tag }}>{{ t }}</{{ tag }}>{% endmacro %}"
        + "{{ b('hi') }}"));
    assertEquals("{\"a\": [1, \"é\"]}|{\"a\":[1,\"é\"]}", render("{{ {'a': [1, 'é']} | tojson }}|"
        + "{{ {'a': [1, 'é']} | tojson(separators=(',', ':')) }}"));
  }

  @Test
  void refusesWhatItDoesNotReadNamingTheLine() {
    TemplateException e = assertThrows(TemplateException.class, () -> ChatTemplate.compile("a\n{% include 'x' %}"));
    assertTrue(e.getMessage().contains("line 2"), e.getMessage());
    assertTrue(assertThrows(TemplateException.class, () -> ChatTemplate.compile("{% if x %}"))
        .getMessage().contains("never closed"));
    assertTrue(assertThrows(TemplateException.class, () -> ChatTemplate.compile("{{ x | nofilter }}")
        .render(List.of(), false, Map.of(), Map.of())).getMessage().contains("no filter named 'nofilter'"));
  }

  private static String render(String template) {
    return ChatTemplate.compile(template).render(List.of(), false, Map.of(), Map.of());
  }
}
