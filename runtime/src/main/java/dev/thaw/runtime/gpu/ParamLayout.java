package dev.thaw.runtime.gpu;

import java.util.ArrayList;
import java.util.List;

/**
 * A kernel's parameters in order, and the size of the buffer that holds them all.
 *
 * @param params the parameters, by index
 * @param totalSize bytes from the first parameter to the end of the last one
 */
public record ParamLayout(List<KernelParam> params, int totalSize) {

  public ParamLayout {
    params = List.copyOf(params);
    for (int i = 0; i < params.size(); i++) {
      KernelParam p = params.get(i);
      if (p.index() != i) {
        throw new IllegalArgumentException("parameter " + i + " has index " + p.index());
      }
      if (p.offset() + p.size() > totalSize) {
        throw new IllegalArgumentException("parameter " + p.describe() + " ends past " + totalSize);
      }
    }
  }

  /** Lays out parameters the way the PTX ABI does: each at the next offset aligned to its alignment. */
  public static ParamLayout ofAligned(List<String> names, List<ParamType> types, List<Integer> sizes,
      List<Integer> alignments) {
    var out = new ArrayList<KernelParam>(names.size());
    int offset = 0;
    for (int i = 0; i < names.size(); i++) {
      int align = alignments.get(i);
      offset = (offset + align - 1) / align * align;
      out.add(new KernelParam(i, names.get(i), offset, sizes.get(i), types.get(i)));
      offset += sizes.get(i);
    }
    return new ParamLayout(out, offset);
  }

  public int count() {
    return params.size();
  }

  public KernelParam get(int index) {
    return params.get(index);
  }
}
