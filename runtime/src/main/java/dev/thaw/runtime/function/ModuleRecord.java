package dev.thaw.runtime.function;

/**
 * One module of a session's table.
 *
 * @param name the name it was loaded under
 * @param ptx its PTX, for devices of another architecture and for parameter layouts
 * @param cubin what the JIT made of it for {@code arch}
 * @param arch the architecture the cubin is for, e.g. {@code sm_90}
 */
public record ModuleRecord(String name, String ptx, byte[] cubin, String arch) {}
