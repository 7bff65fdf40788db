package dev.thaw.runtime.host;

/** The {@code errno} values the host calls here can fail with, by name. */
final class Errno {

  private Errno() {}

  static String describe(int errno) {
    return switch (errno) {
      case 1 -> "EPERM: no permission (ptrace access to the process is needed)";
      case 2 -> "ENOENT: no such file";
      case 3 -> "ESRCH: no such process";
      case 9 -> "EBADF: the descriptor is not open";
      case 12 -> "ENOMEM: out of memory";
      case 13 -> "EACCES: permission denied";
      case 17 -> "EEXIST: it exists";
      case 22 -> "EINVAL: invalid argument";
      case 24 -> "EMFILE: too many open files";
      case 28 -> "ENOSPC: no space left";
      case 38 -> "ENOSYS: the kernel lacks this call";
      default -> "errno " + errno;
    };
  }
}
