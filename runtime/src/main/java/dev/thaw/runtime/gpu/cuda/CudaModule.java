package dev.thaw.runtime.gpu.cuda;

import static dev.thaw.runtime.gpu.cuda.CudaNative.check;

import com.sun.jna.Memory;
import com.sun.jna.Pointer;
import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelParam;
import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.gpu.ParamType;
import dev.thaw.runtime.gpu.PtxCompileException;
import dev.thaw.runtime.ptx.PtxEntries;
import dev.thaw.runtime.ptx.PtxModuleInfo;
import dev.thaw.runtime.ptx.PtxSyntaxException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A {@code CUmodule}. Kernels are looked up once per name and cached; their parameter layouts come from the
 * PTX {@code .entry} when the PTX is known, else from {@code cuFuncGetParamInfo}.
 */
final class CudaModule extends CudaResource implements GpuModule {

  private static final Logger LOG = LoggerFactory.getLogger(CudaModule.class);

  /** Size of each JIT log buffer (info and error). */
  static final int JIT_LOG_BYTES = 64 * 1024;

  // The JIT slab: CUjit_option[5] (int each), then void*[5] option values, the input's name, the two logs.
  private static final int JIT_OPTION_COUNT = 5;
  private static final int JIT_OPTIONS = 0;
  private static final int JIT_VALUES = 32;
  private static final int JIT_NAME = 80;
  private static final int JIT_INFO_LOG = 128;
  private static final int JIT_ERROR_LOG = JIT_INFO_LOG + JIT_LOG_BYTES;
  private static final int JIT_SLAB_BYTES = JIT_ERROR_LOG + JIT_LOG_BYTES;
  private static final byte[] JIT_INPUT_NAME = "thaw.ptx\0".getBytes(StandardCharsets.US_ASCII);

  final long handle;
  private final String ptx;
  private final byte[] cubin;
  private final String jitLog;
  private final PtxModuleInfo info;
  private final Map<String, CudaKernel> kernels = new ConcurrentHashMap<>();

  private CudaModule(CudaContext context, long handle, String ptx, byte[] cubin, String jitLog, PtxModuleInfo info) {
    super(context, String.format("CUDA module 0x%x", handle));
    this.handle = handle;
    this.ptx = ptx;
    this.cubin = cubin;
    this.jitLog = jitLog;
    this.info = info;
  }

  /**
   * JIT-compiles {@code ptx} with {@code cuLinkCreate_v2}/{@code cuLinkAddData_v2}/{@code cuLinkComplete},
   * copies the cubin out and loads it, then destroys the link state. Runs with the context current.
   *
   * @throws PtxCompileException with the JIT error log when the PTX does not compile or link
   */
  static CudaModule jit(CudaContext context, String ptx) {
    byte[] source = ptx.getBytes(StandardCharsets.UTF_8);
    byte[] cubin;
    String infoLog;
    long module;
    try (Memory slab = new Memory(JIT_SLAB_BYTES); Memory data = new Memory(source.length + 1L)) {
      data.write(0, source, 0, source.length);
      data.setByte(source.length, (byte) 0);
      long base = Pointer.nativeValue(slab);
      slab.clear(JIT_INFO_LOG + 1L);
      slab.setByte(JIT_ERROR_LOG, (byte) 0);
      slab.setByte(JIT_INFO_LOG + JIT_LOG_BYTES - 1L, (byte) 0);
      slab.setByte(JIT_ERROR_LOG + JIT_LOG_BYTES - 1L, (byte) 0);
      int[] options = {CudaNative.CU_JIT_INFO_LOG_BUFFER, CudaNative.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
          CudaNative.CU_JIT_ERROR_LOG_BUFFER, CudaNative.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
          CudaNative.CU_JIT_LOG_VERBOSE};
      long[] values = {base + JIT_INFO_LOG, JIT_LOG_BYTES, base + JIT_ERROR_LOG, JIT_LOG_BYTES, 1L};
      slab.write(JIT_OPTIONS, options, 0, JIT_OPTION_COUNT);
      slab.write(JIT_VALUES, values, 0, JIT_OPTION_COUNT);
      slab.write(JIT_NAME, JIT_INPUT_NAME, 0, JIT_INPUT_NAME.length);

      CudaNative.Scratch s = CudaNative.Scratch.get().clear(16);
      // The option values stay valid until cuLinkDestroy: the driver writes log sizes back into them.
      check(CudaNative.cuLinkCreate_v2(JIT_OPTION_COUNT, base + JIT_OPTIONS, base + JIT_VALUES, s.address),
          "cuLinkCreate_v2");
      long state = s.memory.getLong(0);
      try {
        int r = CudaNative.cuLinkAddData_v2(state, CudaNative.CU_JIT_INPUT_PTX, Pointer.nativeValue(data),
            source.length + 1L, base + JIT_NAME, 0, 0L, 0L);
        if (r == CudaError.CUDA_ERROR_OUT_OF_MEMORY) {
          throw CudaNative.error("cuLinkAddData_v2", r);
        }
        if (r != CudaNative.CUDA_SUCCESS) {
          throw new PtxCompileException("cuLinkAddData_v2", r, CudaNative.errorName(r),
              slab.getString(JIT_ERROR_LOG, "UTF-8"));
        }
        s.clear(16);
        r = CudaNative.cuLinkComplete(state, s.address, s.address + 8);
        if (r == CudaError.CUDA_ERROR_OUT_OF_MEMORY) {
          throw CudaNative.error("cuLinkComplete", r);
        }
        if (r != CudaNative.CUDA_SUCCESS) {
          throw new PtxCompileException("cuLinkComplete", r, CudaNative.errorName(r),
              slab.getString(JIT_ERROR_LOG, "UTF-8"));
        }
        long image = s.memory.getLong(0);
        long size = s.memory.getLong(8);
        if (image == 0 || size <= 0 || size > Integer.MAX_VALUE) {
          throw new IllegalStateException("cuLinkComplete returned an image of " + size + " bytes at 0x"
              + Long.toHexString(image));
        }
        cubin = new Pointer(image).getByteArray(0, (int) size);
        infoLog = slab.getString(JIT_INFO_LOG, "UTF-8");
        // The image is owned by the link state, so it is loaded before cuLinkDestroy.
        s.clear(8);
        check(CudaNative.cuModuleLoadData(s.address, image), "cuModuleLoadData");
        module = s.memory.getLong(0);
      } finally {
        int r = CudaNative.cuLinkDestroy(state);
        if (r != CudaNative.CUDA_SUCCESS) {
          LOG.warn("cuLinkDestroy failed: {} ({})", CudaNative.errorName(r), r);
        }
      }
    }
    PtxModuleInfo info;
    try {
      info = PtxEntries.parse(ptx);
    } catch (PtxSyntaxException e) {
      // The driver compiled it, so it is PTX; layouts then come untyped from cuFuncGetParamInfo.
      LOG.warn("Thaw's PTX reader cannot read a module the driver compiled; kernel layouts will be untyped: {}",
          e.getMessage());
      info = null;
    }
    return new CudaModule(context, module, ptx, cubin, infoLog, info);
  }

  /** Loads a cubin or fatbin with {@code cuModuleLoadData}; keeps a copy of the bytes. */
  static CudaModule load(CudaContext context, byte[] image) {
    byte[] copy = image.clone();
    long module;
    try (Memory m = new Memory(copy.length)) {
      m.write(0, copy, 0, copy.length);
      CudaNative.Scratch s = CudaNative.Scratch.get().clear(8);
      check(CudaNative.cuModuleLoadData(s.address, Pointer.nativeValue(m)), "cuModuleLoadData");
      module = s.memory.getLong(0);
    }
    return new CudaModule(context, module, null, copy, "", null);
  }

  @Override
  public Optional<String> ptx() {
    return Optional.ofNullable(ptx);
  }

  @Override
  public byte[] cubin() {
    return cubin.clone();
  }

  @Override
  public String jitLog() {
    return jitLog;
  }

  @Override
  public List<String> kernelNames() {
    return info == null ? List.of() : List.copyOf(info.entries().keySet());
  }

  @Override
  public Kernel kernel(String name) {
    Objects.requireNonNull(name, "name");
    checkOpen();
    CudaKernel k = kernels.get(name);
    return k != null ? k : kernels.computeIfAbsent(name, this::lookUp);
  }

  private CudaKernel lookUp(String name) {
    context.ensureCurrent();
    long function;
    try (Memory cname = CudaNative.cString(name)) {
      CudaNative.Scratch s = CudaNative.Scratch.get().clear(8);
      check(CudaNative.cuModuleGetFunction(s.address, handle, Pointer.nativeValue(cname)), "cuModuleGetFunction");
      function = s.memory.getLong(0);
    }
    ParamLayout layout = info != null && info.entries().containsKey(name)
        ? info.entries().get(name)
        : paramInfo(function);
    return new CudaKernel(this, name, function, layout);
  }

  /** {@code cuFuncGetParamInfo} for index 0, 1, ... until {@code CUDA_ERROR_INVALID_VALUE} ends the list. */
  private static ParamLayout paramInfo(long function) {
    List<KernelParam> params = new ArrayList<>();
    int total = 0;
    CudaNative.Scratch s = CudaNative.Scratch.get();
    for (int i = 0; ; i++) {
      s.clear(16);
      int r = CudaNative.cuFuncGetParamInfo(function, i, s.address, s.address + 8);
      if (r == CudaNative.CUDA_ERROR_INVALID_VALUE) {
        break;
      }
      check(r, "cuFuncGetParamInfo");
      int offset = Math.toIntExact(s.memory.getLong(0));
      int size = Math.toIntExact(s.memory.getLong(8));
      params.add(new KernelParam(i, "param" + i, offset, size, ParamType.UNTYPED));
      total = Math.max(total, offset + size);
    }
    return new ParamLayout(params, total);
  }

  @Override
  String describe() {
    return String.format("CUDA module 0x%x", handle);
  }

  @Override
  int rank() {
    return RANK_MODULE;
  }

  @Override
  void free() {
    check(CudaNative.cuModuleUnload(handle), "cuModuleUnload");
  }
}
