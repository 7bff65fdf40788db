package dev.thaw.image;

import java.io.IOException;
import java.io.InputStream;
import java.util.Properties;

/** Thaw's version, from the image builder jar's Maven metadata; {@code development} when run from classes. */
public final class ThawVersion {

  private static final String POM_PROPERTIES = "/META-INF/maven/dev.thaw/thaw-image-builder/pom.properties";
  private static final String VERSION = load();

  private ThawVersion() {}

  public static String get() {
    return VERSION;
  }

  private static String load() {
    try (InputStream in = ThawVersion.class.getResourceAsStream(POM_PROPERTIES)) {
      if (in != null) {
        Properties p = new Properties();
        p.load(in);
        return p.getProperty("version", "development");
      }
    } catch (IOException e) {
      // Informative only.
    }
    return "development";
  }
}
