package dev.thaw.runtime.text;

import java.time.LocalDateTime;
import java.time.format.TextStyle;
import java.util.Locale;

/** Python's {@code strftime} for the directives templates use ({@code "%d %b %Y"}: Llama 3's date line). */
final class Strftime {

  private Strftime() {}

  static String format(String pattern, LocalDateTime t) {
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < pattern.length(); i++) {
      char c = pattern.charAt(i);
      if (c != '%' || i + 1 == pattern.length()) {
        b.append(c);
        continue;
      }
      char d = pattern.charAt(++i);
      switch (d) {
        case 'd' -> b.append(two(t.getDayOfMonth()));
        case 'm' -> b.append(two(t.getMonthValue()));
        case 'Y' -> b.append(t.getYear());
        case 'y' -> b.append(two(t.getYear() % 100));
        case 'H' -> b.append(two(t.getHour()));
        case 'M' -> b.append(two(t.getMinute()));
        case 'S' -> b.append(two(t.getSecond()));
        case 'j' -> b.append(String.format(Locale.ROOT, "%03d", t.getDayOfYear()));
        case 'b' -> b.append(t.getMonth().getDisplayName(TextStyle.SHORT, Locale.US));
        case 'B' -> b.append(t.getMonth().getDisplayName(TextStyle.FULL, Locale.US));
        case 'a' -> b.append(t.getDayOfWeek().getDisplayName(TextStyle.SHORT, Locale.US));
        case 'A' -> b.append(t.getDayOfWeek().getDisplayName(TextStyle.FULL, Locale.US));
        case '%' -> b.append('%');
        default -> b.append('%').append(d);
      }
    }
    return b.toString();
  }

  private static String two(int v) {
    return v < 10 ? "0" + v : Integer.toString(v);
  }
}
