package dev.thaw.runtime.gpu;

/**
 * The type of a kernel parameter, as far as Java needs it to marshal a value.
 *
 * <p>From PTX: {@code .u8/.s8/.b8} → {@link #INT8}, {@code .u16/.s16/.b16/.f16/.bf16} → {@link #INT16},
 * {@code .u32/.s32/.b32} → {@link #INT32}, {@code .u64/.s64/.b64} → {@link #INT64} (pointers are
 * {@code .u64}), {@code .f32} → {@link #FLOAT32}, {@code .f64} → {@link #FLOAT64}, and a byte array
 * ({@code .align A .b8 name[N]}, a struct passed by value) → {@link #BYTES}. A kernel loaded from a cubin
 * without its PTX only has sizes: {@link #UNTYPED}, where any value of the right width is accepted.
 */
public enum ParamType {
  INT8,
  INT16,
  INT32,
  INT64,
  FLOAT32,
  FLOAT64,
  BYTES,
  UNTYPED
}
