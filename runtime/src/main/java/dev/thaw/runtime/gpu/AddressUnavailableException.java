package dev.thaw.runtime.gpu;

/**
 * An exact device address was asked for and is taken. Nothing was reserved: Thaw never silently hands out
 * a different address where an exact one was requested.
 */
public class AddressUnavailableException extends RuntimeException {

  private final long address;
  private final long size;

  public AddressUnavailableException(long address, long size, String detail) {
    super(String.format("device range [0x%x, 0x%x) is not available: %s", address, address + size, detail));
    this.address = address;
    this.size = size;
  }

  public long address() {
    return address;
  }

  public long size() {
    return size;
  }
}
