package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelParam;
import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.gpu.ParamType;
import dev.thaw.runtime.ptx.PtxModuleInfo;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A module on the simulated device.
 *
 * <h2>The sim "cubin"</h2>
 * The binary image of a sim module is the ASCII magic {@code THAWSIM1}, the device architecture as one line
 * ({@code sm_90\n}), then the PTX text in UTF-8. {@link SimContext#loadCubin} reads it back: anything without
 * the magic is {@code CUDA_ERROR_INVALID_IMAGE}; an image for another architecture is
 * {@code CUDA_ERROR_NO_BINARY_FOR_GPU}. As with a real cubin, a module loaded from it reports no PTX and no
 * kernel names, and its kernels' parameters have sizes but no types ({@link ParamType#UNTYPED}).
 */
final class SimModule implements GpuModule {

  static final byte[] MAGIC = "THAWSIM1".getBytes(StandardCharsets.US_ASCII);

  private final SimContext context;
  private final String ptx;
  private final PtxModuleInfo info;
  private final byte[] cubin;
  private final boolean fromCubin;
  private final ConcurrentHashMap<String, SimFunction> kernels = new ConcurrentHashMap<>();
  private volatile boolean closed;

  SimModule(SimContext context, String ptx, PtxModuleInfo info, byte[] cubin, boolean fromCubin) {
    this.context = context;
    this.ptx = ptx;
    this.info = info;
    this.cubin = cubin;
    this.fromCubin = fromCubin;
  }

  static byte[] cubinOf(String arch, String ptx) {
    byte[] head = (arch + "\n").getBytes(StandardCharsets.US_ASCII);
    byte[] body = ptx.getBytes(StandardCharsets.UTF_8);
    byte[] out = new byte[MAGIC.length + head.length + body.length];
    System.arraycopy(MAGIC, 0, out, 0, MAGIC.length);
    System.arraycopy(head, 0, out, MAGIC.length, head.length);
    System.arraycopy(body, 0, out, MAGIC.length + head.length, body.length);
    return out;
  }

  SimContext context() {
    return context;
  }

  @Override
  public Optional<String> ptx() {
    checkOpen();
    return fromCubin ? Optional.empty() : Optional.of(ptx);
  }

  @Override
  public byte[] cubin() {
    checkOpen();
    return cubin.clone();
  }

  @Override
  public String jitLog() {
    checkOpen();
    return "";
  }

  @Override
  public List<String> kernelNames() {
    checkOpen();
    return fromCubin ? List.of() : List.copyOf(info.entries().keySet());
  }

  @Override
  public Kernel kernel(String name) {
    checkOpen();
    String call = "cuModuleGetFunction";
    context.checkUsable(call);
    SimFunction cached = kernels.get(name);
    if (cached != null) {
      return cached;
    }
    ParamLayout layout = info.entries().get(name);
    if (layout == null) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_NOT_FOUND, "the module has no .entry named '" + name + "'");
    }
    SimKernel impl = context.driver().kernel(name);
    if (impl == null) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_NOT_FOUND, "no Java kernel is registered for .entry '"
          + name + "' (list a " + SimKernel.class.getName() + " for it in META-INF/services)");
    }
    return kernels.computeIfAbsent(name, n -> new SimFunction(this, n, fromCubin ? untyped(layout) : layout, impl));
  }

  private static ParamLayout untyped(ParamLayout typed) {
    List<KernelParam> out = new ArrayList<>(typed.count());
    for (KernelParam p : typed.params()) {
      out.add(new KernelParam(p.index(), "param" + p.index(), p.offset(), p.size(), ParamType.UNTYPED));
    }
    return new ParamLayout(out, typed.totalSize());
  }

  void checkOpen() {
    if (closed) {
      throw new IllegalStateException("module is closed");
    }
  }

  boolean isClosed() {
    return closed;
  }

  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    context.forget(this);
  }
}
