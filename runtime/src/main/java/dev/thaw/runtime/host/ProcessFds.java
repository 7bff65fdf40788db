package dev.thaw.runtime.host;

import com.sun.jna.LastErrorException;
import java.io.IOException;

/**
 * File descriptors across processes: {@link #take} copies a descriptor out of another process with
 * {@code pidfd_open} + {@code pidfd_getfd} (Linux 5.6), which is how a pool hands exported GPU memory from
 * one worker to the next without a socket. The caller needs ptrace permission over the other process
 * ({@code PTRACE_MODE_ATTACH_REALCREDS}): root has it; under Yama {@code ptrace_scope=1} a parent has it over
 * its children but a child not over its parent.
 */
public final class ProcessFds {

  private ProcessFds() {}

  /**
   * A new descriptor in this process for descriptor {@code fd} of process {@code pid}; close it with
   * {@link #close}.
   *
   * @throws IOException with {@code errno}'s meaning when the process is gone, the descriptor is not open
   *     there ({@code EBADF}), or permission is missing ({@code EPERM})
   */
  public static int take(long pid, int fd) throws IOException {
    int pidfd;
    try {
      pidfd = (int) HostNative.syscall(HostNative.SYS_PIDFD_OPEN, pid, 0, 0);
    } catch (LastErrorException e) {
      throw failure("pidfd_open(" + pid + ")", e);
    }
    try {
      return (int) HostNative.syscall(HostNative.SYS_PIDFD_GETFD, pidfd, fd, 0);
    } catch (LastErrorException e) {
      throw failure("pidfd_getfd(pid " + pid + ", fd " + fd + ")", e);
    } finally {
      HostNative.close(pidfd);
    }
  }

  /**
   * New descriptors in this process for descriptors {@code fds} of process {@code pid}, in order, through one
   * {@code pidfd_open}: all or none (when one cannot be taken, those taken already are closed again).
   *
   * @throws IOException as {@link #take(long, int)}
   */
  public static int[] takeAll(long pid, int[] fds) throws IOException {
    int pidfd;
    try {
      pidfd = (int) HostNative.syscall(HostNative.SYS_PIDFD_OPEN, pid, 0, 0);
    } catch (LastErrorException e) {
      throw failure("pidfd_open(" + pid + ")", e);
    }
    int[] mine = new int[fds.length];
    int taken = 0;
    try {
      for (; taken < fds.length; taken++) {
        mine[taken] = (int) HostNative.syscall(HostNative.SYS_PIDFD_GETFD, pidfd, fds[taken], 0);
      }
      return mine;
    } catch (LastErrorException e) {
      for (int i = 0; i < taken; i++) {
        close(mine[i]);
      }
      throw failure("pidfd_getfd(pid " + pid + ", fd " + fds[taken] + ")", e);
    } finally {
      HostNative.close(pidfd);
    }
  }

  /** A second descriptor for the same open file, e.g. one to hand over while keeping the first. */
  public static int dup(int fd) throws IOException {
    try {
      return HostNative.dup(fd);
    } catch (LastErrorException e) {
      throw failure("dup(" + fd + ")", e);
    }
  }

  /** Closes a descriptor this process owns; a negative one is ignored. */
  public static void close(int fd) {
    if (fd < 0) {
      return;
    }
    try {
      HostNative.close(fd);
    } catch (LastErrorException e) {
      // EBADF: already closed. Nothing else can go wrong for a descriptor we own.
    }
  }

  /** This process's id. */
  public static long currentPid() {
    return ProcessHandle.current().pid();
  }

  static IOException failure(String call, LastErrorException e) {
    return new IOException(call + " failed: errno " + e.getErrorCode() + " (" + Errno.describe(e.getErrorCode())
        + ")", e);
  }
}
