package dev.thaw.image.store;

import java.util.regex.Pattern;

/**
 * What an image tag may be: {@code name} or {@code name:version}, where the name is lowercase
 * {@code [a-z0-9][a-z0-9._-]*} and the version {@code [A-Za-z0-9._-]+}, at most {@link #MAX_LENGTH}
 * characters, and never {@code ..} (a tag becomes a file name in exports and CLI output).
 */
public final class Tags {

  public static final int MAX_LENGTH = 128;
  public static final String RULE = "[a-z0-9][a-z0-9._-]*(:[A-Za-z0-9._-]+)?";
  private static final Pattern PATTERN = Pattern.compile(RULE);

  private Tags() {}

  private static IllegalArgumentException invalid(String tag, String rule) {
    String shown = tag == null ? "" : tag.length() > 40 ? tag.substring(0, 37) + "..." : tag;
    return new IllegalArgumentException("'" + shown + "' is not a tag: " + rule);
  }

  /**
   * Returns {@code tag} if valid.
   *
   * @throws IllegalArgumentException naming the rule it breaks
   */
  public static String check(String tag) {
    if (tag == null || tag.isEmpty()) {
      throw invalid(tag, "a tag must not be empty");
    }
    if (tag.length() > MAX_LENGTH) {
      throw invalid(tag, "a tag is at most " + MAX_LENGTH + " characters, this one has " + tag.length());
    }
    if (tag.contains("..")) {
      throw invalid(tag, "a tag must not contain '..'");
    }
    if (!PATTERN.matcher(tag).matches()) {
      throw invalid(tag, "a tag must match " + RULE + " (name[:version])");
    }
    return tag;
  }
}
