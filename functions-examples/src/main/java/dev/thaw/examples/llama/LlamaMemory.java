package dev.thaw.examples.llama;

import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionSession;
import java.nio.ByteBuffer;

/**
 * The device buffers of one Llama (or one tensor-parallel rank of it), by name: a function session's, whose table an
 * image records, or a rank's own allocations ({@link RankMemory}). The passes resolve every address through it once.
 */
interface LlamaMemory {

  /** A new buffer of {@code bytes} named {@code name}. */
  BufferRef allocate(String name, long bytes);

  /** The buffer's device address; fixed for the memory's life. */
  long address(BufferRef ref);

  /** Copies {@code src} (position to limit) to the start of the buffer; complete when it returns. */
  void upload(BufferRef ref, ByteBuffer src);

  /** Copies the buffer's bytes from {@code offset} into {@code dst} (position to limit); complete when it returns. */
  void download(BufferRef ref, long offset, ByteBuffer dst);

  /** Device bytes held. */
  long bytes();

  /** A session's buffers. */
  static LlamaMemory of(FunctionSession session) {
    return new LlamaMemory() {
      @Override
      public BufferRef allocate(String name, long bytes) {
        return session.allocate(name, bytes);
      }

      @Override
      public long address(BufferRef ref) {
        return session.address(ref);
      }

      @Override
      public void upload(BufferRef ref, ByteBuffer src) {
        session.upload(ref, 0, src);
      }

      @Override
      public void download(BufferRef ref, long offset, ByteBuffer dst) {
        session.download(ref, offset, dst);
      }

      @Override
      public long bytes() {
        return session.table().allocatedBytes();
      }
    };
  }
}
