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

  /**
   * Returns {@code tag} if valid.
   *
   * @throws IllegalArgumentException naming the rule it breaks
   */
  public static String check(String tag) {
    if (tag == null || tag.isEmpty()) {
      throw new IllegalArgumentException("a tag must not be empty");
    }
    if (tag.length() > MAX_LENGTH) {
      throw new IllegalArgumentException(
          "a tag is at most " + MAX_LENGTH + " characters, this one has " + tag.length());
    }
    if (tag.contains("..")) {
      throw new IllegalArgumentException("a tag must not contain '..': " + tag);
    }
    if (!PATTERN.matcher(tag).matches()) {
      throw new IllegalArgumentException("a tag must match " + RULE + " (name[:version]), not '" + tag + "'");
    }
    return tag;
  }
}
