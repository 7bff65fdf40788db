package dev.thaw.runtime.host;

import java.io.IOException;
import java.nio.file.AccessDeniedException;
import java.nio.file.FileSystemException;
import java.nio.file.NoSuchFileException;
import java.nio.file.NotDirectoryException;
import java.util.Locale;

/** I/O errors in words for messages a person reads. */
public final class IoErrors {

  private IoErrors() {}

  /** An I/O error's cause in words, never a class name: {@code permission denied}, {@code no such file}. */
  public static String describe(IOException e) {
    if (e instanceof AccessDeniedException) {
      return "permission denied";
    }
    if (e instanceof NoSuchFileException) {
      return "no such file or directory";
    }
    if (e instanceof NotDirectoryException) {
      return "not a directory";
    }
    if (e instanceof FileSystemException f && f.getReason() != null) {
      return f.getReason().toLowerCase(Locale.ROOT);
    }
    return e.getMessage() == null ? "I/O error" : e.getMessage();
  }
}
