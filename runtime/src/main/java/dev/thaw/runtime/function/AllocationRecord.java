package dev.thaw.runtime.function;

/**
 * One allocation of a session's table.
 *
 * @param name the name it was allocated under
 * @param address its device address, where a rebuilt session maps it again
 * @param size the bytes asked for (the mapping is rounded up to the granularity)
 */
public record AllocationRecord(String name, long address, long size) {}
