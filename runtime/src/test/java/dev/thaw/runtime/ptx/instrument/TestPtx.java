package dev.thaw.runtime.ptx.instrument;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/** The nvcc PTX the instrumentation tests use, and ptxas when it is on the PATH. */
final class TestPtx {

  static final String CONTRACT = "/dev/thaw/runtime/gpu/contract/contract.ptx";
  static final String CHECK = "/dev/thaw/runtime/check/check.ptx";
  static final String INSTRUMENT = "/dev/thaw/runtime/ptx/instrument/instrument.ptx";

  /** Every nvcc module of the runtime: name to PTX. */
  static Map<String, String> modules() {
    return Map.of("contract.ptx", resource(CONTRACT), "check.ptx", resource(CHECK), "instrument.ptx",
        resource(INSTRUMENT));
  }

  static String resource(String name) {
    try (InputStream in = TestPtx.class.getResourceAsStream(name)) {
      if (in == null) {
        throw new IllegalStateException(name + " is missing from the classpath");
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** A one-kernel module around {@code body}, with registers %p, %r, %rd, %f, %rs declared. */
  static String kernel(String target, String body) {
    return ".version 8.0\n.target " + target + "\n.address_size 64\n\n"
        + ".visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n"
        + "\t.reg .pred %p<4>;\n\t.reg .b16 %rs<4>;\n\t.reg .b32 %r<8>;\n\t.reg .f32 %f<8>;\n\t.reg .b64 %rd<8>;\n"
        + "\tld.param.u64 %rd1, [k_param_0];\n\tcvta.to.global.u64 %rd2, %rd1;\n"
        + body + "\n\tret;\n}\n";
  }

  static String kernel(String body) {
    return kernel("sm_90", body);
  }

  /** ptxas from the PATH, or null. */
  static Path ptxas() {
    String path = System.getenv("PATH");
    if (path == null) {
      return null;
    }
    for (String dir : path.split(File.pathSeparator)) {
      Path p = Path.of(dir, "ptxas");
      if (Files.isExecutable(p)) {
        return p;
      }
    }
    return null;
  }

  /** Assembles {@code ptx} for {@code arch}; returns the cubin, or throws with ptxas' output. */
  static byte[] assemble(Path ptxas, String ptx, String arch) {
    try {
      Path dir = Files.createTempDirectory("thaw-ptxas");
      Path in = dir.resolve("in.ptx");
      Path out = dir.resolve("out.cubin");
      Files.writeString(in, ptx);
      List<String> cmd = new ArrayList<>(List.of(ptxas.toString(), "-arch=" + arch, in.toString(), "-o",
          out.toString()));
      Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
      String log = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      if (!p.waitFor(120, TimeUnit.SECONDS)) {
        p.destroyForcibly();
        throw new AssertionError("ptxas -arch=" + arch + " timed out");
      }
      if (p.exitValue() != 0) {
        throw new AssertionError("ptxas -arch=" + arch + " failed (" + p.exitValue() + "):\n" + log);
      }
      byte[] cubin = Files.readAllBytes(out);
      Files.delete(in);
      Files.delete(out);
      Files.delete(dir);
      return cubin;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new AssertionError("interrupted", e);
    }
  }

  private TestPtx() {}
}
