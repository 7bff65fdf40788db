package dev.thaw.runtime.ptx;

/** PTX text that Thaw's reader cannot accept, with the 1-based line where it stopped. */
public class PtxSyntaxException extends RuntimeException {

  private final int line;

  public PtxSyntaxException(int line, String message) {
    super("ptx input, line " + line + "; error   : " + message);
    this.line = line;
  }

  public int line() {
    return line;
  }
}
