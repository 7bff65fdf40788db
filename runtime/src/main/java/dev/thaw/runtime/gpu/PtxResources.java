package dev.thaw.runtime.gpu;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/** PTX modules that ship as class-path resources beside the code that launches them. */
public final class PtxResources {

  private PtxResources() {}

  /**
   * The text of the PTX resource {@code path} ({@link Class#getResourceAsStream}'s form: absolute, or relative to
   * {@code owner}'s package), ready for {@link GpuContext#loadPtx}.
   *
   * @throws IllegalStateException when the resource is not on the class path (a broken build, never an input)
   */
  public static String read(Class<?> owner, String path) {
    try (InputStream in = owner.getResourceAsStream(path)) {
      if (in == null) {
        throw new IllegalStateException("the PTX " + path + " of " + owner.getSimpleName()
            + " is not on the class path");
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException("cannot read " + path, e);
    }
  }
}
