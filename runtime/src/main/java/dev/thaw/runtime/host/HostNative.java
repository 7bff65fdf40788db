package dev.thaw.runtime.host;

import com.sun.jna.LastErrorException;
import com.sun.jna.Native;
import com.sun.jna.Platform;

/**
 * The few C library calls shared memory and descriptor passing need, through JNA direct mapping with
 * {@code long}/{@code int}-only signatures (as {@code CudaNative}); a failure throws {@link LastErrorException}
 * carrying {@code errno}. Linux x86-64 only: the syscall numbers are that ABI's.
 */
final class HostNative {

  static {
    Native.register(HostNative.class, Platform.C_LIBRARY_NAME);
  }

  private HostNative() {}

  static final int O_RDONLY = 0;
  static final int O_RDWR = 2;
  static final int O_CREAT = 0100;
  static final int O_EXCL = 0200;
  static final int O_CLOEXEC = 02000000;
  static final int PROT_READ = 1;
  static final int PROT_WRITE = 2;
  static final int MAP_SHARED = 1;
  static final long MAP_FAILED = -1L;
  static final int SEEK_END = 2;
  static final int MFD_CLOEXEC = 1;

  /** {@code __NR_pidfd_open} and {@code __NR_pidfd_getfd} on x86-64 (Linux 5.3 and 5.6). */
  static final long SYS_PIDFD_OPEN = 434;
  static final long SYS_PIDFD_GETFD = 438;

  /** {@code open(const char *path, int flags, mode_t mode)}; {@code path} is a NUL-terminated string's address. */
  static native int open(long path, int flags, int mode) throws LastErrorException;

  static native int close(int fd) throws LastErrorException;

  static native int ftruncate(int fd, long length) throws LastErrorException;

  static native long lseek(int fd, long offset, int whence) throws LastErrorException;

  static native long mmap(long addr, long length, int prot, int flags, int fd, long offset) throws LastErrorException;

  static native int munmap(long addr, long length) throws LastErrorException;

  static native int memfd_create(long name, int flags) throws LastErrorException;

  static native int dup(int fd) throws LastErrorException;

  /** {@code long syscall(long number, ...)} with three arguments; unused ones are 0. */
  static native long syscall(long number, long a, long b, long c) throws LastErrorException;
}
