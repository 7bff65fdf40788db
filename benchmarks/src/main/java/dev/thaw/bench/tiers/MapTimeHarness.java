package dev.thaw.bench.tiers;

import dev.thaw.pool.hbm.ExportedSlab;
import dev.thaw.pool.hbm.HbmExport;
import dev.thaw.pool.hbm.ResidentSlabs;
import dev.thaw.runtime.function.AllocationRecord;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.MapPlan;
import dev.thaw.runtime.function.SessionTable;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.runtime.host.ProcessFds;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.function.BiConsumer;

/**
 * Map time of an image with GPT-2-large's 518 buffers (its tensors in fp16, then its I/O, activation and KV-cache
 * buffers at batch 1, 64 tokens), without building one: the buffers are allocated by a recording session packed
 * and per buffer (as before packing), and the tables are rebuilt the old way (one {@code allocateAt} per buffer)
 * and the new way ({@link MapPlan} slabs). Then the HBM tier: the weights' read-only slabs exported, imported and
 * mapped read-only. Run: {@code java -cp <classpath> dev.thaw.bench.tiers.MapTimeHarness}; {@code THAW_DEVICE}
 * picks the device.
 */
public final class MapTimeHarness {

  private static final int REPEATS = 9;

  private MapTimeHarness() {}

  /** GPT-2-large's buffers in the order {@code Gpt2Function} allocates them; the weights are read-only. */
  static List<long[]> gpt2LargeSizes(List<String> names, Set<String> weights) {
    int d = 1280;
    int layers = 36;
    int vocab = 50257;
    int positions = 1024;
    int tokens = 64;
    List<long[]> sizes = new ArrayList<>();
    BiConsumer<String, Long> add = (n, s) -> {
      names.add(n);
      sizes.add(new long[] {s});
    };
    add.accept("wte", 2L * vocab * d);
    add.accept("wpe", 2L * positions * d);
    for (int l = 0; l < layers; l++) {
      String p = "h." + l + ".";
      add.accept(p + "ln_1.weight", 2L * d);
      add.accept(p + "ln_1.bias", 2L * d);
      add.accept(p + "attn.c_attn.weight", 2L * d * 3 * d);
      add.accept(p + "attn.c_attn.bias", 2L * 3 * d);
      add.accept(p + "attn.c_proj.weight", 2L * d * d);
      add.accept(p + "attn.c_proj.bias", 2L * d);
      add.accept(p + "ln_2.weight", 2L * d);
      add.accept(p + "ln_2.bias", 2L * d);
      add.accept(p + "mlp.c_fc.weight", 2L * d * 4 * d);
      add.accept(p + "mlp.c_fc.bias", 2L * 4 * d);
      add.accept(p + "mlp.c_proj.weight", 2L * 4 * d * d);
      add.accept(p + "mlp.c_proj.bias", 2L * d);
    }
    add.accept("ln_f.weight", 2L * d);
    add.accept("ln_f.bias", 2L * d);
    weights.addAll(names);
    for (String io : List.of("io.tokens", "io.positions", "io.cache_rows")) {
      add.accept(io, 4L * tokens);
    }
    add.accept("act.x", 4L * tokens * d);
    add.accept("act.ln", 2L * tokens * d);
    add.accept("act.qkv", 2L * tokens * 3 * d);
    add.accept("act.attn", 2L * tokens * d);
    add.accept("act.fc", 2L * tokens * 4 * d);
    add.accept("act.last", 2L * d);
    add.accept("act.logits", 4L * vocab);
    for (int l = 0; l < layers; l++) {
      add.accept("kv." + l + ".k", 2L * tokens * d);
      add.accept("kv." + l + ".v", 2L * tokens * d);
    }
    return sizes;
  }

  public static void main(String[] args) {
    List<String> names = new ArrayList<>();
    Set<String> weights = new LinkedHashSet<>();
    List<long[]> sizes = gpt2LargeSizes(names, weights);
    try (GpuDriver driver = GpuDrivers.open(); GpuContext ctx = driver.createContext(0)) {
      System.out.printf("device: %s (%s)%n", ctx.device().describe(), driver.isSimulated() ? "SIMULATED: no GPU numbers"
          : "cuda " + driver.driverVersion());
      for (FunctionSession.Packing packing : FunctionSession.Packing.values()) {
        SessionTable table;
        try (FunctionSession s = FunctionSession.record(ctx, packing)) {
          for (int i = 0; i < names.size(); i++) {
            s.allocate(names.get(i), sizes.get(i)[0]);
          }
          table = new SessionTable(s.table().allocations(), List.of());
        }
        MapPlan plan = MapPlan.of(table.allocations(), Set.of(), ctx.granularity());
        MapPlan roPlan = MapPlan.of(table.allocations(), weights, ctx.granularity());
        System.out.printf("gpt2-large %s: %d buffers, %.1f MB asked, %.1f MB mapped in %d slabs (%d with the weights "
            + "read-only: %.1f MB read-only)%n", packing, table.allocations().size(), table.allocatedBytes() / 1e6,
            plan.mappedBytes() / 1e6, plan.slabs().size(), roPlan.slabs().size(),
            roPlan.readOnlySlabs().stream().mapToLong(MapPlan.Slab::size).sum() / 1e6);
        double oldWay = median(() -> {
          long t = System.nanoTime();
          List<DeviceBuffer> buffers = new ArrayList<>();
          try {
            for (AllocationRecord a : table.allocations()) {
              buffers.add(ctx.allocateAt(a.address() & -ctx.granularity(), a.size()));
            }
            return ms(t);
          } finally {
            buffers.forEach(DeviceBuffer::close);
          }
        }, packing == FunctionSession.Packing.PER_BUFFER);
        if (!Double.isNaN(oldWay)) {
          System.out.printf("gpt2-large %s map, one allocateAt per buffer (before): %.3f ms median%n", packing, oldWay);
        }
        double newWay = median(() -> {
          long t = System.nanoTime();
          try (FunctionSession s = FunctionSession.rebuild(ctx, table)) {
            return ms(t);
          }
        }, true);
        System.out.printf("gpt2-large %s map, MapPlan slabs (now): %.3f ms median%n", packing, newWay);
        hbm(ctx, table, weights, packing);
      }
    }
  }

  private static void hbm(GpuContext ctx, SessionTable table, Set<String> weights, FunctionSession.Packing packing) {
    List<ExportedSlab> held;
    try (FunctionSession first = FunctionSession.rebuild(ctx, table, weights,
        FunctionSession.SlabSource.EXPORTABLE_READ_ONLY)) {
      first.protectReadOnlySlabs();
      held = HbmExport.exportReadOnly(first);
    }
    try {
      double t = median(() -> {
        List<ExportedSlab> dups = new ArrayList<>();
        for (ExportedSlab s : held) {
          dups.add(s.withFd(ProcessFds.dup(s.fd())));
        }
        try (ResidentSlabs r = new ResidentSlabs(dups)) {
          long t0 = System.nanoTime();
          try (FunctionSession next = FunctionSession.rebuild(ctx, table, weights, r)) {
            double d = ms(t0);
            if (r.residentBuffers().isEmpty()) {
              throw new IllegalStateException("nothing was imported");
            }
            return d;
          }
        }
      }, true);
      System.out.printf("gpt2-large %s hbm: rebuild with %.1f MB of weights imported read-only in %d slabs: %.3f ms "
          + "median (all slabs mapped, fresh ones included)%n", packing, ExportedSlab.bytes(held) / 1e6, held.size(), t);
    } finally {
      HbmExport.close(held);
    }
  }

  private interface Timed {
    double run() throws Exception;
  }

  private static double median(Timed t, boolean run) {
    if (!run) {
      return Double.NaN;
    }
    double[] d = new double[REPEATS];
    try {
      for (int i = 0; i < REPEATS; i++) {
        d[i] = t.run();
      }
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
    Arrays.sort(d);
    return d[REPEATS / 2];
  }

  private static double ms(long t0) {
    return (System.nanoTime() - t0) / 1e6;
  }
}
