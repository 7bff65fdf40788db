package dev.thaw.pool.protocol;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.protocol.WorkerMessages.Become;
import dev.thaw.pool.protocol.WorkerMessages.BecomeAnswer;
import dev.thaw.pool.protocol.WorkerMessages.BecomeGroup;
import dev.thaw.pool.protocol.WorkerMessages.Cancel;
import dev.thaw.pool.protocol.WorkerMessages.Device;
import dev.thaw.pool.protocol.WorkerMessages.Exit;
import dev.thaw.pool.protocol.WorkerMessages.ExitAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Export;
import dev.thaw.pool.protocol.WorkerMessages.ExportAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Failure;
import dev.thaw.pool.protocol.WorkerMessages.Forget;
import dev.thaw.pool.protocol.WorkerMessages.ForgetAnswer;
import dev.thaw.pool.protocol.WorkerMessages.GroupRank;
import dev.thaw.pool.protocol.WorkerMessages.Hbm;
import dev.thaw.pool.protocol.WorkerMessages.Head;
import dev.thaw.pool.protocol.WorkerMessages.Invoke;
import dev.thaw.pool.protocol.WorkerMessages.InvokeAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Near;
import dev.thaw.pool.protocol.WorkerMessages.Part;
import dev.thaw.pool.protocol.WorkerMessages.Prepare;
import dev.thaw.pool.protocol.WorkerMessages.PrepareAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Ready;
import dev.thaw.pool.protocol.WorkerMessages.Recycle;
import dev.thaw.pool.protocol.WorkerMessages.RecycleAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Resident;
import dev.thaw.pool.protocol.WorkerMessages.Source;
import dev.thaw.pool.protocol.WorkerMessages.Status;
import dev.thaw.pool.protocol.WorkerMessages.StatusAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Trace;
import dev.thaw.pool.protocol.WorkerMessages.TraceAnswer;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.lang.reflect.RecordComponent;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * Pins the worker protocol's typed heads: every message survives the wire (a frame written and read back decodes to
 * an equal record), a head's keys are its record's component names, and the protocol table in
 * {@code docs/design/context-pool.md} lists exactly those keys for every message, and a row for every message.
 */
class WorkerMessagesTest {

  private static final Map<String, Double> PHASES = phases();

  private static Map<String, Double> phases() {
    Map<String, Double> p = new LinkedHashMap<>();
    p.put("queued", 0.25);
    p.put("manifest", 1.5);
    p.put("total", 1.75);
    return p;
  }

  /** One instance of every message with every optional component present, and how to read it back. */
  private static Map<Head, Function<Frame, Head>> samples() {
    Map<Head, Function<Frame, Head>> m = new LinkedHashMap<>();
    m.put(new Ready(42, FrameCodec.VERSION, new Device("sim", true, "Thaw Sim", 1), PHASES, true,
        List.of("a@1", "b@2"), List.of(1)), f -> Ready.from(f.head()));
    m.put(new Become("gpt2", new Source("cache", "/store", new Hbm(7, "1000:2097152:9:w\n"), List.of(1, 3), 0.5,
        new Hbm(7, "1000:2097152:11:w\n", 1)), 0, true, "gpt2@1", true), f -> Become.from(f.head()));
    m.put(new Invoke(12, 900, true), f -> Invoke.from(f.head(), f.body().length));
    m.put(new Cancel(), f -> new Cancel());
    m.put(new Status(), f -> new Status());
    m.put(new Exit(), f -> new Exit());
    m.put(new Export(), f -> new Export());
    m.put(new Prepare("tp@1", "tp", -1, 8, List.of(new GroupRank("tp-rank0:1", -1, null, 3, 0),
        new GroupRank("tp-rank1:1", -1, null, 5, 2))), f -> Prepare.from(f.head(), f.body().length));
    Source store = new Source("store", "/store", null);
    m.put(new BecomeGroup("tp", List.of(new GroupRank("tp-rank0:1", 0, store, 3, 0), new GroupRank("tp-rank1:1", 1,
        new Source("cache", "/store", null), 0, 2)), true, "tp@1"), f -> BecomeGroup.from(f.head()));
    m.put(new Forget(List.of("a@1")), f -> Forget.from(f.head()));
    m.put(new Trace(64), f -> Trace.from(f.head(), 512));
    m.put(new Recycle(true), f -> Recycle.from(f.head()));
    m.put(new Near(), f -> new Near());
    m.put(new Part(), f -> new Part());
    m.put(new Resident(30.5, 100, 60, 30, 10, 4, 1, 2, 8, 20), f -> Resident.from(f.head()));
    m.put(new BecomeAnswer(PHASES, 1 << 20, "hbm", List.of(1), false, 0.5, 123456789L, 123456999L),
        f -> BecomeAnswer.from(f.head()));
    m.put(new InvokeAnswer(2, PHASES), f -> InvokeAnswer.from(f.head(), f.body().length));
    m.put(new PrepareAnswer(PHASES, List.of("old@1")), f -> PrepareAnswer.from(f.head()));
    m.put(new ForgetAnswer(List.of("a@1")), f -> ForgetAnswer.from(f.head()));
    m.put(new ExportAnswer(42, "1000:2097152:9:w\n"), f -> ExportAnswer.from(f.head()));
    m.put(new TraceAnswer(5, 9), f -> TraceAnswer.from(f.head()));
    m.put(new StatusAnswer(42, "READY", "gpt2", 3, 1), f -> StatusAnswer.from(f.head()));
    m.put(new ExitAnswer(), f -> new ExitAnswer());
    m.put(new RecycleAnswer(PHASES, 4 << 20, 2 << 20, List.of("a@1"), List.of(1), 2),
        f -> RecycleAnswer.from(f.head()));
    m.put(new Failure(WorkerErrorKind.CUDA, "dev.thaw.runtime.gpu.CudaException", "launch failed",
        "cuLaunchKernel", 700, "CUDA_ERROR_ILLEGAL_ADDRESS"), f -> Failure.from(f.head()));
    return m;
  }

  @Test
  void everyMessageSurvivesTheWire() throws Exception {
    for (Map.Entry<Head, Function<Frame, Head>> e : samples().entrySet()) {
      Head head = e.getKey();
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      FrameCodec.write(out, Frame.of(9, head, new byte[] {'{', '}', 1, 2}));
      Frame read = FrameCodec.read(new ByteArrayInputStream(out.toByteArray()), 1 << 20);
      assertEquals(head.type(), read.type(), head.toString());
      assertEquals(head, e.getValue().apply(read), "read back as it was written");
    }
  }

  @Test
  void aHeadsKeysAreItsRecordsComponents() {
    for (Head head : samples().keySet()) {
      assertEquals(components(head.getClass()), keys(head.toJson()), head.getClass().getSimpleName());
    }
    assertEquals(components(Source.class), keys(samples().keySet().stream().filter(h -> h instanceof Become)
        .map(h -> ((Become) h).source().toJson()).findFirst().orElseThrow()));
    assertEquals(components(GroupRank.class), keys(samples().keySet().stream().filter(h -> h instanceof BecomeGroup)
        .map(h -> ((BecomeGroup) h).ranks().get(0).toJson()).findFirst().orElseThrow()));
  }

  @Test
  void theDesignTableListsEveryMessageWithItsKeys() throws Exception {
    Map<String, Set<String>> table = designTable();
    List<Class<?>> all = new ArrayList<>();
    all.addAll(Arrays.asList(WorkerMessages.Request.class.getPermittedSubclasses()));
    all.addAll(Arrays.asList(WorkerMessages.Reply.class.getPermittedSubclasses()));
    all.addAll(List.of(Source.class, Hbm.class, Device.class, GroupRank.class));
    for (Class<?> c : all) {
      assertTrue(table.containsKey(c.getSimpleName()), "context-pool.md has a row for " + c.getSimpleName());
      assertEquals(components(c), table.get(c.getSimpleName()), "context-pool.md's keys of " + c.getSimpleName());
    }
    assertEquals(all.size(), table.size(), "no row for a message that does not exist: " + table.keySet());
  }

  private static Set<String> components(Class<?> record) {
    Set<String> names = new TreeSet<>();
    for (RecordComponent c : record.getRecordComponents()) {
      names.add(c.getName());
    }
    return names;
  }

  private static Set<String> keys(ObjectNode n) {
    Set<String> names = new TreeSet<>();
    Iterator<String> it = n.fieldNames();
    it.forEachRemaining(names::add);
    return names;
  }

  /** The protocol section's table: per message (first column), the backticked words of its head column, {@code ?} dropped. */
  private static Map<String, Set<String>> designTable() throws Exception {
    Path doc = Path.of(System.getProperty("user.dir")).getParent().resolve("docs/design/context-pool.md");
    Map<String, Set<String>> rows = new LinkedHashMap<>();
    Pattern row = Pattern.compile("^\\| `(\\w+)` \\|[^|]*\\|[^|]*\\|(.*?)\\|");
    Pattern key = Pattern.compile("`(\\w+)\\??`");
    boolean inProtocol = false;
    for (String line : Files.readAllLines(doc)) {
      if (line.startsWith("## ")) {
        inProtocol = line.startsWith("## Protocol");
      }
      Matcher m = row.matcher(line);
      if (!inProtocol) {
        continue;
      }
      if (!m.find()) {
        continue;
      }
      Set<String> keys = new TreeSet<>();
      // Only the words before a parenthesis's explanation: keys are listed first, comments in parentheses.
      Matcher k = key.matcher(m.group(2).replaceAll("\\([^)]*\\)", ""));
      while (k.find()) {
        keys.add(k.group(1));
      }
      rows.put(m.group(1), keys);
    }
    return rows;
  }
}
