package dev.thaw.runtime.gpu.sim;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.ParamType;
import dev.thaw.runtime.gpu.PtxCompileException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Pins PTX loading errors, the sim cubin round trip and kernel lookup. */
class SimModuleTest {

  private SimDriver driver;
  private GpuContext ctx;

  @BeforeEach
  void open() {
    driver = SimDriver.open(new SimOptions());
    ctx = driver.createContext(0);
  }

  @AfterEach
  void close() {
    ctx.close();
    driver.close();
  }

  @Test
  void garbagePtxFailsLikeTheJitWithLineAndProblem() {
    PtxCompileException e = assertThrows(PtxCompileException.class, () -> ctx.loadPtx("hello\nworld\n"));
    assertEquals(CudaError.CUDA_ERROR_INVALID_PTX, e.code());
    assertEquals("cuLinkAddData", e.call());
    assertTrue(e.jitLog().contains("line 1"), e.jitLog());
    assertTrue(e.jitLog().contains("'hello'"), e.jitLog());

    String unbalanced = ".version 8.0\n.target sm_90\n.entry k()\n{\n ret;\n";
    PtxCompileException e2 = assertThrows(PtxCompileException.class, () -> ctx.loadPtx(unbalanced));
    assertTrue(e2.jitLog().contains("unclosed '{'"), e2.jitLog());

    PtxCompileException tooNew = assertThrows(PtxCompileException.class,
        () -> ctx.loadPtx(".version 8.0\n.target sm_100\n"));
    assertTrue(tooNew.jitLog().contains("sm_100"), tooNew.jitLog());
    // The context is still usable.
    ctx.allocate(1).close();
  }

  @Test
  void cubinRoundTripsAndForeignImagesAreRejected() {
    GpuModule fromPtx = ctx.loadPtx(TestKernels.PTX);
    assertEquals(TestKernels.PTX, fromPtx.ptx().orElseThrow());
    assertTrue(fromPtx.kernelNames().contains("sim_test_scale"));
    byte[] cubin = fromPtx.cubin();
    assertArrayEquals("THAWSIM1".getBytes(StandardCharsets.US_ASCII), Arrays.copyOf(cubin, 8));

    GpuModule fromCubin = ctx.loadCubin(cubin);
    assertTrue(fromCubin.ptx().isEmpty());
    assertArrayEquals(cubin, fromCubin.cubin());
    Kernel scale = fromCubin.kernel("sim_test_scale");
    assertSame(scale, fromCubin.kernel("sim_test_scale"));
    assertEquals(ParamType.UNTYPED, scale.params().get(0).type());

    // An untyped kernel still runs.
    DeviceBuffer a = ctx.allocate(64);
    DeviceBuffer b = ctx.allocate(64);
    ctx.memsetD32(a.address(), Float.floatToIntBits(3f), 4);
    GpuStream stream = ctx.createStream();
    scale.launch(Dim3.of(1), Dim3.of(4), stream, a, b, 4, 2f);
    stream.synchronize();
    ByteBuffer out = ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN);
    b.copyToHost(out);
    assertEquals(6f, out.getFloat(12));

    CudaException bad = assertThrows(CudaException.class, () -> ctx.loadCubin(new byte[] {0x7f, 'E', 'L', 'F'}));
    assertEquals(CudaError.CUDA_ERROR_INVALID_IMAGE, bad.code());
    try (SimDriver ampere = SimDriver.open(new SimOptions().setComputeCapability(8, 0));
        GpuContext other = ampere.createContext(0)) {
      CudaException arch = assertThrows(CudaException.class, () -> other.loadCubin(cubin));
      assertEquals(CudaError.CUDA_ERROR_NO_BINARY_FOR_GPU, arch.code());
    }
  }

  @Test
  void missingEntryAndMissingJavaKernelAreNotFound() {
    GpuModule module = ctx.loadPtx(TestKernels.PTX);
    CudaException none = assertThrows(CudaException.class, () -> module.kernel("nope"));
    assertEquals(CudaError.CUDA_ERROR_NOT_FOUND, none.code());
    assertFalse(none.getMessage().contains("Java"));
    CudaException noJava = assertThrows(CudaException.class, () -> module.kernel("sim_test_no_java"));
    assertEquals(CudaError.CUDA_ERROR_NOT_FOUND, noJava.code());
    assertTrue(noJava.getMessage().contains("no Java kernel is registered"), noJava.getMessage());

    module.close();
    module.close();
    assertThrows(IllegalStateException.class, () -> module.kernel("sim_test_scale"));
  }

  @Test
  void badLaunchesAreRefusedBeforeAnythingIsQueued() {
    GpuModule module = ctx.loadPtx(TestKernels.PTX);
    Kernel scale = module.kernel("sim_test_scale");
    GpuStream stream = ctx.createStream();
    assertThrows(IllegalArgumentException.class, () -> scale.launch(Dim3.of(1), Dim3.of(1), stream, 1L, 2L, 3));
    assertThrows(IllegalArgumentException.class, () -> scale.launch(Dim3.of(1), Dim3.of(2048), stream, 1L, 2L, 3, 1f));
    assertThrows(IllegalArgumentException.class,
        () -> scale.launch(Dim3.of(1), Dim3.of(1), 0, stream, scale.newArgs().set(0, 1L)));
    assertTrue(stream.isIdle());
  }
}
