package dev.thaw.server;

import java.util.regex.Pattern;

/** What a function's name may be: it appears in URLs, metric labels and log lines. */
public final class FunctionNames {

  /** Lower-case letters and digits, inner {@code - . _}, at most 63 characters (a DNS label, plus . and _). */
  public static final Pattern NAME = Pattern.compile("[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?");

  private FunctionNames() {}

  public static boolean valid(String name) {
    return name != null && NAME.matcher(name).matches();
  }

  /** @throws IllegalArgumentException if {@code name} is not a function name, saying what one is */
  public static String check(String name) {
    if (!valid(name)) {
      throw new IllegalArgumentException("'" + name + "' is not a function name: lower-case letters, digits and "
          + "inner - . _, at most 63 characters");
    }
    return name;
  }
}
