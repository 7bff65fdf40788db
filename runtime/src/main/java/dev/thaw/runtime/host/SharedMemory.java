package dev.thaw.runtime.host;

import com.sun.jna.LastErrorException;
import com.sun.jna.Memory;
import com.sun.jna.Pointer;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A shared file mapped into this process ({@code mmap(MAP_SHARED)}): a file under {@code /dev/shm} that other
 * processes open by path, or an anonymous {@code memfd} they receive as a descriptor. Every process that maps
 * it sees the same bytes. Mapped read-only ({@code PROT_READ}), a store through the mapping would kill the
 * process, so the views handed out are read-only {@link ByteBuffer}s.
 *
 * <p>Unlike {@link MappedByteBuffer} it maps more than 2 GiB at one address, which is what
 * {@code cuMemHostRegister} needs. {@link #close()} unmaps and closes the descriptor; the owner that
 * {@link #create created} a file also removes it. Idempotent.
 */
public final class SharedMemory implements AutoCloseable {

  private final long address;
  private final long size;
  private final int fd;
  private final boolean readOnly;
  private final Path ownedFile;
  private final AtomicBoolean closed = new AtomicBoolean();

  private SharedMemory(long address, long size, int fd, boolean readOnly, Path ownedFile) {
    this.address = address;
    this.size = size;
    this.fd = fd;
    this.readOnly = readOnly;
    this.ownedFile = ownedFile;
  }

  /**
   * Creates {@code path} (which must not exist) with {@code size} zero bytes and maps it read-write. The file is
   * removed when this is closed.
   */
  public static SharedMemory create(Path path, long size) throws IOException {
    checkSize(size);
    int fd = openPath(path, HostNative.O_RDWR | HostNative.O_CREAT | HostNative.O_EXCL | HostNative.O_CLOEXEC, 0600);
    try {
      HostNative.ftruncate(fd, size);
      return new SharedMemory(map(fd, size, false, path.toString()), size, fd, false, path);
    } catch (LastErrorException | IOException e) {
      HostNative.close(fd);
      Files.deleteIfExists(path);
      throw e instanceof IOException io ? io : ProcessFds.failure("ftruncate(" + path + ")", (LastErrorException) e);
    }
  }

  /** Maps an existing file whole; another process created it. */
  public static SharedMemory open(Path path, boolean readOnly) throws IOException {
    int fd = openPath(path, (readOnly ? HostNative.O_RDONLY : HostNative.O_RDWR) | HostNative.O_CLOEXEC, 0);
    try {
      long size = HostNative.lseek(fd, 0, HostNative.SEEK_END);
      checkSize(size);
      return new SharedMemory(map(fd, size, readOnly, path.toString()), size, fd, readOnly, null);
    } catch (LastErrorException | IOException e) {
      HostNative.close(fd);
      throw e instanceof IOException io ? io : ProcessFds.failure("lseek(" + path + ")", (LastErrorException) e);
    }
  }

  /** An anonymous shared file ({@code memfd_create}) of {@code size} zero bytes, mapped read-write. */
  public static SharedMemory anonymous(String name, long size) throws IOException {
    checkSize(size);
    int fd;
    try (Memory n = cString(name)) {
      fd = HostNative.memfd_create(Pointer.nativeValue(n), HostNative.MFD_CLOEXEC);
    } catch (LastErrorException e) {
      throw ProcessFds.failure("memfd_create", e);
    }
    try {
      HostNative.ftruncate(fd, size);
      return new SharedMemory(map(fd, size, false, name), size, fd, false, null);
    } catch (LastErrorException | IOException e) {
      HostNative.close(fd);
      throw e instanceof IOException io ? io : ProcessFds.failure("ftruncate(memfd " + name + ")",
          (LastErrorException) e);
    }
  }

  /** Maps {@code size} bytes of the file behind descriptor {@code fd}; this object owns {@code fd} from now on. */
  public static SharedMemory fromFd(int fd, long size, boolean readOnly) throws IOException {
    checkSize(size);
    long fileSize;
    try {
      fileSize = HostNative.lseek(fd, 0, HostNative.SEEK_END);
    } catch (LastErrorException e) {
      throw ProcessFds.failure("lseek(fd " + fd + ")", e);
    }
    // Mapping past the end of the file would fault (SIGBUS) at the first access, not here.
    if (fileSize < size) {
      throw new IOException("fd " + fd + " holds " + fileSize + " bytes, not the " + size + " asked for");
    }
    return new SharedMemory(map(fd, size, readOnly, "fd " + fd), size, fd, readOnly, null);
  }

  private static int openPath(Path path, int flags, int mode) throws IOException {
    try (Memory p = cString(path.toString())) {
      return HostNative.open(Pointer.nativeValue(p), flags, mode);
    } catch (LastErrorException e) {
      throw ProcessFds.failure("open(" + path + ")", e);
    }
  }

  private static long map(int fd, long size, boolean readOnly, String what) throws IOException {
    int prot = readOnly ? HostNative.PROT_READ : HostNative.PROT_READ | HostNative.PROT_WRITE;
    try {
      return HostNative.mmap(0, size, prot, HostNative.MAP_SHARED, fd, 0);
    } catch (LastErrorException e) {
      throw ProcessFds.failure("mmap(" + what + ", " + size + " bytes)", e);
    }
  }

  private static void checkSize(long size) {
    if (size <= 0) {
      throw new IllegalArgumentException("shared memory needs a positive size, not " + size);
    }
  }

  private static Memory cString(String s) {
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    Memory m = new Memory(b.length + 1L);
    m.write(0, b, 0, b.length);
    m.setByte(b.length, (byte) 0);
    return m;
  }

  /** The address of the first byte in this process. */
  public long address() {
    checkOpen();
    return address;
  }

  public long size() {
    return size;
  }

  /** The descriptor of the file, owned by this object: {@link ProcessFds#dup} it to hand it on. */
  public int fd() {
    checkOpen();
    return fd;
  }

  public boolean isReadOnly() {
    return readOnly;
  }

  /** A little-endian view of {@code [offset, offset + length)}; read-only when the mapping is. */
  public ByteBuffer slice(long offset, int length) {
    checkOpen();
    if (offset < 0 || length < 0 || offset > size - length) {
      throw new IllegalArgumentException("[" + offset + ", +" + length + ") is outside " + size + " bytes of shared memory");
    }
    ByteBuffer b = new Pointer(address).getByteBuffer(offset, length).order(ByteOrder.LITTLE_ENDIAN);
    return readOnly ? b.asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN) : b;
  }

  private void checkOpen() {
    if (closed.get()) {
      throw new IllegalStateException("shared memory is closed");
    }
  }

  @Override
  public void close() {
    if (!closed.compareAndSet(false, true)) {
      return;
    }
    try {
      HostNative.munmap(address, size);
    } catch (LastErrorException e) {
      // EINVAL only, for a mapping that is not there: nothing to undo.
    }
    ProcessFds.close(fd);
    if (ownedFile != null) {
      try {
        Files.deleteIfExists(ownedFile);
      } catch (IOException e) {
        // The file stays in /dev/shm; the next owner's create() reports it.
      }
    }
  }

  @Override
  public String toString() {
    return String.format("SharedMemory[0x%x, %d bytes%s]", address, size, readOnly ? ", read-only" : "");
  }
}
