package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.ParamLayout;
import java.util.Optional;

/**
 * What one launch on the simulated device did: its arguments and the exact device bytes it read and wrote.
 * Given to {@link SimContext#addLaunchListener launch listeners} after each launch that ran, including one
 * that faulted (then the logs hold the accesses before the fault, and {@link #fault()} says what happened).
 */
public final class SimLaunchRecord {

  private final String kernelName;
  private final ParamLayout params;
  private final byte[] args;
  private final Dim3 grid;
  private final Dim3 block;
  private final AccessLog reads;
  private final AccessLog writes;
  private final CudaException fault;

  SimLaunchRecord(String kernelName, ParamLayout params, byte[] args, Dim3 grid, Dim3 block, AccessLog reads,
      AccessLog writes, CudaException fault) {
    this.kernelName = kernelName;
    this.params = params;
    this.args = args;
    this.grid = grid;
    this.block = block;
    this.reads = reads;
    this.writes = writes;
    this.fault = fault;
  }

  /** The {@code .entry} name. */
  public String kernelName() {
    return kernelName;
  }

  public ParamLayout params() {
    return params;
  }

  /** The parameter bytes as launched, laid out as {@link #params()} says (a copy). */
  public byte[] args() {
    return args.clone();
  }

  public Dim3 grid() {
    return grid;
  }

  public Dim3 block() {
    return block;
  }

  /** Device bytes the launch read, normalised. */
  public AccessLog reads() {
    return reads;
  }

  /** Device bytes the launch wrote, normalised. */
  public AccessLog writes() {
    return writes;
  }

  /**
   * Why the launch failed: {@code CUDA_ERROR_ILLEGAL_ADDRESS} for a bad access, {@code CUDA_ERROR_LAUNCH_FAILED}
   * for an exception thrown by the kernel. Empty when it completed.
   */
  public Optional<CudaException> fault() {
    return Optional.ofNullable(fault);
  }

  @Override
  public String toString() {
    return "SimLaunchRecord[" + kernelName + ", reads " + reads + ", writes " + writes
        + (fault == null ? "" : ", fault " + fault.getMessage()) + "]";
  }
}
