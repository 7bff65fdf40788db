package dev.thaw.runtime.ptx.instrument;

/**
 * An access that no allowed range permitted.
 *
 * @param site the {@link AccessSite#id()} of the instruction
 * @param address the generic address of its first byte
 * @param size how many bytes it covers
 * @param kind what it does
 */
public record GuardViolation(int site, long address, int size, AccessOp kind) {

  @Override
  public String toString() {
    return String.format("%s of %d bytes at 0x%x by site %d", kind, size, address, site);
  }
}
