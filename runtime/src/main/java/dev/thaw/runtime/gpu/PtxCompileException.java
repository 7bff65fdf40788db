package dev.thaw.runtime.gpu;

/** PTX did not compile. {@link #jitLog()} has the JIT's error log, which names the line and the problem. */
public class PtxCompileException extends CudaException {

  private final String jitLog;

  public PtxCompileException(String call, int code, String errorName, String jitLog) {
    super(call, code, errorName, jitLog == null || jitLog.isBlank() ? "(empty JIT log)" : "\n" + jitLog.strip());
    this.jitLog = jitLog == null ? "" : jitLog;
  }

  public String jitLog() {
    return jitLog;
  }
}
