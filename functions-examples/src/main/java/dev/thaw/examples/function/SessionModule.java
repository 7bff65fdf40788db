package dev.thaw.examples.function;

import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.Kernel;
import java.util.List;
import java.util.Optional;

/**
 * A session's module seen as a {@link GpuModule} whose kernels are the session's: so a launcher class built
 * on a module ({@code Gpt2Kernels}, {@code LlamaKernels}) launches through {@link FunctionSession#kernel}, and every launch passes
 * the session's interceptor (speculation, validation, restore gating). Closing it does nothing: the session
 * owns the module.
 */
public final class SessionModule implements GpuModule {

  private final FunctionSession session;
  private final String name;
  private final GpuModule module;

  public SessionModule(FunctionSession session, String name, String anyEntry) {
    this.session = session;
    this.name = name;
    this.module = session.kernel(new KernelRef(name, anyEntry)).module();
  }

  @Override
  public Optional<String> ptx() {
    return module.ptx();
  }

  @Override
  public byte[] cubin() {
    return module.cubin();
  }

  @Override
  public String jitLog() {
    return module.jitLog();
  }

  @Override
  public List<String> kernelNames() {
    return module.kernelNames();
  }

  @Override
  public Kernel kernel(String entry) {
    return session.kernel(new KernelRef(name, entry));
  }

  @Override
  public void close() {}
}
