package dev.thaw.runtime.speculation;

import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/** A sim driver, context and function session, by default with the speculation module loaded; closes all three. */
final class SpecSession implements AutoCloseable {

  final SimDriver driver = SimDriver.open(new SimOptions());
  final GpuContext context = driver.createContext(0);
  final FunctionSession session = FunctionSession.record(context);

  SpecSession() {
    this(true);
  }

  /** With the speculation module loaded, or an empty session for a function that loads its own. */
  SpecSession(boolean loadSpeculationModule) {
    if (loadSpeculationModule) {
      session.loadModule(SpeculationKernels.MODULE, SpeculationKernels.ptx());
    }
  }

  KernelRef kernel(String entry) {
    return session.kernelRef(SpeculationKernels.MODULE, entry);
  }

  BufferRef floats(String name, int n, float value) {
    BufferRef b = session.allocate(name, 4L * n);
    ByteBuffer data = ByteBuffer.allocateDirect(4 * n).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < n; i++) {
      data.putFloat(4 * i, value + i);
    }
    session.upload(b, 0, data);
    return b;
  }

  long address(BufferRef b) {
    return session.address(b);
  }

  void putLongs(BufferRef b, long... values) {
    ByteBuffer data = ByteBuffer.allocateDirect(8 * values.length).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < values.length; i++) {
      data.putLong(8 * i, values[i]);
    }
    session.upload(b, 0, data);
  }

  @Override
  public void close() {
    session.close();
    context.close();
    driver.close();
  }
}
