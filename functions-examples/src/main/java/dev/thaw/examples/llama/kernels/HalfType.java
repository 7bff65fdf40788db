package dev.thaw.examples.llama.kernels;

import dev.thaw.examples.gpt2.kernels.Fp16;
import dev.thaw.examples.safetensors.DType;
import java.util.Locale;

/**
 * The 16-bit float type a Llama model's weights, activations and KV cache are held in: IEEE binary16 or bfloat16.
 * Values are raw bit patterns in a {@code short}; conversions to float are exact, from float round to nearest
 * even (CUDA's {@code __float2half_rn} / {@code __float2bfloat16_rn}).
 */
public enum HalfType {
  FP16(DType.F16, 0, "float16"),
  BF16(DType.BF16, 1, "bfloat16");

  private final DType dtype;
  private final int flag;
  private final String torchName;

  HalfType(DType dtype, int flag, String torchName) {
    this.dtype = dtype;
    this.flag = flag;
    this.torchName = torchName;
  }

  /** The safetensors dtype that stores it. */
  public DType dtype() {
    return dtype;
  }

  /** The kernels' {@code bf16} argument. */
  public int flag() {
    return flag;
  }

  /** PyTorch's name ({@code config.json}'s {@code torch_dtype} / {@code dtype}). */
  public String torchName() {
    return torchName;
  }

  /** By PyTorch's name, or "fp16" / "bf16". */
  public static HalfType parse(String name) {
    String n = name.toLowerCase(Locale.ROOT);
    for (HalfType t : values()) {
      if (t.torchName.equals(n) || t.name().toLowerCase(Locale.ROOT).equals(n)) {
        return t;
      }
    }
    if (n.equals("half")) {
      return FP16;
    }
    throw new IllegalArgumentException("'" + name + "' is not float16 or bfloat16");
  }

  /** The kernels' flag back to a type. */
  public static HalfType ofFlag(int flag) {
    return flag != 0 ? BF16 : FP16;
  }

  public float toFloat(short bits) {
    return this == FP16 ? Fp16.toFloat(bits) : Float.intBitsToFloat((bits & 0xFFFF) << 16);
  }

  public short fromFloat(float f) {
    return this == FP16 ? Fp16.fromFloat(f) : bf16(f);
  }

  /** bfloat16 nearest to {@code f}, ties to even; NaN stays a quiet NaN of the same sign. */
  static short bf16(float f) {
    int bits = Float.floatToRawIntBits(f);
    if ((bits & 0x7FFFFFFF) > 0x7F800000) {
      return (short) ((bits >>> 16) | 0x40);
    }
    return (short) ((bits + 0x7FFF + ((bits >>> 16) & 1)) >>> 16);
  }

  public void toFloats(short[] src, int srcOff, float[] dst, int dstOff, int len) {
    if (this == FP16) {
      Fp16.toFloats(src, srcOff, dst, dstOff, len);
    } else {
      for (int i = 0; i < len; i++) {
        dst[dstOff + i] = Float.intBitsToFloat((src[srcOff + i] & 0xFFFF) << 16);
      }
    }
  }

  public void fromFloats(float[] src, int srcOff, short[] dst, int dstOff, int len) {
    for (int i = 0; i < len; i++) {
      dst[dstOff + i] = fromFloat(src[srcOff + i]);
    }
  }
}
