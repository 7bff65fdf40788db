package dev.thaw.cli;

/** How a command opens the image store. */
enum StoreAccess {
  /** Read-only: no lock, works while a build writes; never changes the store. */
  READ,
  /** For writing a store that exists. */
  WRITE,
  /** For writing, creating the store where there is none ({@code build}, {@code import --init}). */
  CREATE
}
